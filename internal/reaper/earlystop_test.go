package reaper_test

import (
	"context"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// A drain stops early only when every intent it has left waits for a name:
// one whose sandbox is still being confirmed gone (stuck destroying) keeps
// it going to its deadline, beside an intent whose name closes after it.
func TestDrainDoesNotStopEarlyWhileASandboxIsBeingConfirmed(t *testing.T) {
	t.Parallel()
	w := newWorld(t, daytonatest.WithDestroyDelay(time.Hour))
	w.r.ProgressInterval = 20 * time.Millisecond
	w.r.NameWaitGrace = 300 * time.Millisecond
	stuck := w.intent(scope, intent.DrainDelete)
	w.create(stuck)
	absent := w.intent(scope, intent.DrainDelete)
	const deadline = 3 * time.Second
	ctx, cancel := w.drainCtx(deadline)
	defer cancel()
	start := time.Now()
	rep := w.r.Drain(ctx, []intent.Intent{stuck, absent})
	if rep.StoppedEarly != "" {
		t.Fatalf("stopped early after %s with a sandbox still being confirmed gone: %q", time.Since(start), rep.StoppedEarly)
	}
	if took := time.Since(start); took < deadline-time.Second {
		t.Fatalf("the drain ended after %s, before its deadline %s", took, deadline)
	}
	if len(rep.Unresolved) != 2 || rep.Gone != 0 {
		t.Fatalf("gone %d, unresolved %+v: want both left live", rep.Gone, rep.Unresolved)
	}
}

// A drain stops early only when the first of the names it waits for closes
// after its deadline: an intent whose name closes as never-created before
// the deadline is waited for and closed, and only then does the drain stop
// early for the one whose name closes after it.
func TestDrainWaitsForANameThatClosesBeforeItsDeadline(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.r.ProgressInterval = 20 * time.Millisecond
	w.r.NameWaitGrace = 300 * time.Millisecond
	early := w.intent(scope, intent.DrainDelete)
	// Real time, on purpose: the two names must close at different times,
	// and when a name closes is its intent's CreatedAt, which the journal
	// stamps from the wall clock at the declaration, plus the horizon; the
	// drain's deadline it is weighed against is a real context deadline.
	// No simulator is asked (the names never appear), so no simulated
	// clock can stand in. The gap gives each side a second's margin for a
	// look-up delayed on a loaded machine.
	time.Sleep(2 * time.Second)
	late := w.intent(scope, intent.DrainDelete)
	gap := late.CreatedAt.Sub(early.CreatedAt)
	deadline := time.Now().Add(8 * time.Second)
	// early closes gap/2 before the deadline, late gap/2 after it.
	w.r.NeverCreatedHorizon = deadline.Sub(early.CreatedAt) - gap/2
	ctx, cancel := context.WithDeadline(t.Context(), deadline)
	defer cancel()
	rep := w.r.Drain(ctx, []intent.Intent{early, late})
	if rep.NeverCreated != 1 || len(rep.Unresolved) != 1 || rep.Unresolved[0].ID != late.ID {
		t.Fatalf("never-created %d, unresolved %+v (stopped early: %q): want the early name closed and the late one left", rep.NeverCreated, rep.Unresolved, rep.StoppedEarly)
	}
	if rep.StoppedEarly == "" {
		t.Errorf("with only the late name left the drain did not stop early")
	}
	if in := w.journaled(early.ID); in.Live() {
		t.Errorf("the early intent is %s, want closed as never-created", in.State)
	}
}
