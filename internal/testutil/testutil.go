// Package testutil holds what tether's tests share: one set of wait bounds,
// bounded polls (WaitFor, Eventually, Poll), a buffer one goroutine writes while the test reads it, the
// tether binary (and other commands of the module) built once per `go test`
// run, one process helper for the binaries the tests run, a pseudo-terminal,
// each provider's simulator with the real provider on it and the
// environment a tether run needs for it (Daytona, E2B), a bit flipped in a
// journal record, and WaitingParallel, more tests at once for a package
// whose tests mostly wait. Only tests import it.
package testutil

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

// The bounds of every wait in the tests. Each is a ceiling, never a delay: a
// wait ends as soon as its condition holds. They are far above what a step
// takes on an idle machine, so that a loaded 2-core machine never fails a
// test that passes on an idle one, and bounded, so that a test whose code
// broke fails instead of hanging until go test's own timeout.
const (
	// WaitBound bounds the wait for one event: a condition polled, a line
	// of a process, an answer of a server, a runner's "ready".
	WaitBound = 60 * time.Second
	// ExitBound bounds the wait for a process to exit, which may include a
	// whole drain under DrainTimeout.
	ExitBound = 2 * WaitBound
	// DrainTimeout is the drain deadline given to a tether whose drain must
	// converge when the deadline itself is not what a test is about; the
	// drain's report then proves it converged before it.
	DrainTimeout = 30 * time.Second
)

// pollEvery is the pause between two looks at a condition polled.
const pollEvery = 5 * time.Millisecond

// WaitFor polls cond every few milliseconds until it holds, failing the test
// after WaitBound.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	if !Poll(cond) {
		t.Fatalf("timed out after %s waiting for %s", WaitBound, what)
	}
}

// Eventually is WaitFor for a condition that can say why it does not hold
// yet: the last reason is in the failure.
func Eventually(t testing.TB, what string, cond func() (ok bool, why string)) {
	t.Helper()
	var why string
	if !Poll(func() (ok bool) { ok, why = cond(); return ok }) {
		t.Fatalf("%s: not within %s: %s", what, WaitBound, why)
	}
}

// Poll polls cond every few milliseconds until it holds or WaitBound has
// passed, and reports whether it held. It fails nothing, so a goroutine
// other than the test's (an actor, a handler) may wait with it and act on
// the answer.
func Poll(cond func() bool) bool {
	deadline := time.Now().Add(WaitBound)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pollEvery)
	}
	return true
}

// Receive waits for one value of ch, failing the test after WaitBound.
func Receive[T any](t testing.TB, what string, ch <-chan T) T {
	t.Helper()
	timer := time.NewTimer(WaitBound)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("timed out after %s waiting for %s", WaitBound, what)
		var zero T
		return zero
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
