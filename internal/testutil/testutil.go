// Package testutil holds the helpers tether's tests share: bounded waits and
// a buffer safe to write from one goroutine while a test reads it.
// Only tests import it.
package testutil

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

// WaitBound is how long WaitFor polls before failing: generous, so a loaded
// 2-core machine never fails a test that would pass on an idle one, and
// bounded, so a test that would hang fails instead.
const WaitBound = 60 * time.Second

// WaitFor polls cond every few milliseconds until it holds, failing the test
// after WaitBound.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(WaitBound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", WaitBound, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Eventually is WaitFor for a condition that can say why it does not hold
// yet: the last reason is in the failure.
func Eventually(t testing.TB, what string, cond func() (ok bool, why string)) {
	t.Helper()
	deadline := time.Now().Add(WaitBound)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %s", what, WaitBound, why)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Buffer is a bytes.Buffer guarded by a mutex: a process's stderr written by
// one goroutine and read by the test in another.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
