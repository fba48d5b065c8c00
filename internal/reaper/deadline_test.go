package reaper_test

import (
	"context"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// TestDrainReturnsAtItsDeadlineWhileIntentsWaitToRetry: every read fails
// (503) and the wait before the next try is an hour, far beyond the
// drain's deadline. The drain must return once its deadline passes, with
// every intent reported live and why, not sleep out the retry wait: a
// docker stop does not wait for --drain-timeout plus a backoff.
//
// The bound on the wait below is not a timing assertion: a drain that
// honours its deadline returns within a few hundred milliseconds of it,
// one that does not sleeps for at least 42 minutes (the hour less the
// jitter).
func TestDrainReturnsAtItsDeadlineWhileIntentsWaitToRetry(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.r.RetryBase, w.r.RetryMax = time.Hour, time.Hour
	var intents []intent.Intent
	for range 3 {
		in := w.intent(scope, intent.DrainDelete)
		intents = append(intents, w.observe(in, w.create(in).ID))
	}
	w.srv.SetFaults(daytonatest.Faults{Rate5xx: 1, Routes: []string{daytonatest.RouteGet, daytonatest.RouteList}})

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan struct{})
	var live int
	var lastErrs []string
	go func() {
		defer close(done)
		rep := w.r.Drain(ctx, intents)
		live = rep.Live()
		for _, it := range rep.Unresolved {
			lastErrs = append(lastErrs, it.LastError)
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the drain did not return within a minute of its 300ms deadline: a retry wait ignores the deadline")
	}
	if live != len(intents) {
		t.Fatalf("%d intents left live, want all %d (every read failed)", live, len(intents))
	}
	for _, e := range lastErrs {
		if e == "" {
			t.Errorf("an intent left live without a reason")
		}
	}
	for _, in := range intents {
		if sb := w.sandbox(in.SandboxID); sb.DeleteRequested {
			t.Errorf("sandbox %s was deleted although it was never read", in.SandboxID)
		}
	}
}
