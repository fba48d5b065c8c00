package reaper_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/provider/daytona"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// A fleet on one organization: what one tether does when the quota it
// shares with the others is spent. Judged by the simulator's record.

// A 429 holds every call of its throttler, not only the one refused: when
// another tether of the organization spent the lifecycle window, the first
// delete this tether sends is refused, and its other deletes wait for the
// block to end instead of being sent into it (where every request would
// be refused and counted against the next window). All are deleted after.
func TestA429HoldsEveryDeleteOfItsThrottler(t *testing.T) {
	t.Parallel()
	w := newWorld(t, daytonatest.WithRateLimit(daytonatest.ThrottlerSandboxLifecycle, 1, time.Second))
	w.r.Concurrency = 1 // one delete at a time: each learns what the one before it did
	var intents []intent.Intent
	var ids []string
	for range 3 {
		in, sb := w.observed("started", intent.DrainDelete, true)
		intents, ids = append(intents, in), append(ids, sb.ID)
	}
	// Another tether of the organization spends the window; this one's
	// provider has not seen the answer.
	w.anotherTetherDeletes(t)
	ctx, cancel := w.drainCtx(generous)
	defer cancel()
	if rep := w.r.Drain(ctx, intents); rep.Gone != len(intents) {
		t.Fatalf("drain: %d gone of %d: %+v", rep.Gone, len(intents), rep.Unresolved)
	}
	for _, id := range ids {
		if !w.sandbox(id).DeleteRequested {
			t.Errorf("sandbox %s not deleted", id)
		}
	}
	st := w.srv.Throttle()
	if st.Refused[daytonatest.ThrottlerSandboxLifecycle] != 1 || st.InWindow[daytonatest.ThrottlerSandboxLifecycle] != 0 {
		t.Errorf("lifecycle: %d refused, %d sent inside a window a 429 announced; want the first refused and none sent into its block",
			st.Refused[daytonatest.ThrottlerSandboxLifecycle], st.InWindow[daytonatest.ThrottlerSandboxLifecycle])
	}
}

// A delete that cannot be sent before the drain's deadline (the lifecycle
// quota is spent past it) is handed off: the sandbox gets auto-stop 1 min
// and auto-delete 0 (a stop intent: auto-stop only), through the
// `authenticated` throttler, which the lifecycle quota does not hold; the
// intent stays live in the journal, saying so, and the report counts it.
// The one sandbox whose delete (or stop) the quota let through in time is
// not touched by a hand-off; which of the three it is, is the gate's
// choice.
func TestHandOffBeforeTheDeadline(t *testing.T) {
	t.Parallel()
	w := newWorld(t, daytonatest.WithRateLimit(daytonatest.ThrottlerSandboxLifecycle, 1, time.Minute))
	w.r.Concurrency = 1
	type one struct {
		in intent.Intent
		id string
	}
	var all []one
	var intents []intent.Intent
	for _, on := range []intent.OnDrain{intent.DrainDelete, intent.DrainDelete, intent.DrainStop} {
		in, sb := w.observed("started", on, true)
		all, intents = append(all, one{in, sb.ID}), append(intents, in)
	}
	ctx, cancel := w.drainCtx(3 * time.Second)
	defer cancel()
	rep := w.r.Drain(ctx, intents)
	if rep.Gone+rep.Stopped != 1 || rep.HandedOff != 2 || rep.Live() != 2 {
		t.Fatalf("drain: %d gone, %d stopped, %d handed off, %d live; want one done, 2 handed off, 2 live: %+v", rep.Gone, rep.Stopped, rep.HandedOff, rep.Live(), rep.Unresolved)
	}
	for _, o := range all {
		sb := w.sandbox(o.id)
		got := w.journaled(o.in.ID)
		switch {
		case !got.Live():
			// Done in time: its settings untouched.
			if sb.AutoStopInterval != 15 || sb.AutoDeleteInterval != -1 {
				t.Errorf("%s done in time (%s): auto-stop %d, auto-delete %d; want its settings untouched", o.in.Name, got.State, sb.AutoStopInterval, sb.AutoDeleteInterval)
			}
		case o.in.OnDrain == intent.DrainDelete:
			if sb.DeleteRequested || sb.AutoStopInterval != 1 || sb.AutoDeleteInterval != 0 {
				t.Errorf("handed off (delete): delete requested %v, auto-stop %d, auto-delete %d; want auto-stop 1, auto-delete 0", sb.DeleteRequested, sb.AutoStopInterval, sb.AutoDeleteInterval)
			}
		default:
			if sb.State != "started" || sb.AutoStopInterval != 1 || sb.AutoDeleteInterval != -1 {
				t.Errorf("handed off (stop): %s, auto-stop %d, auto-delete %d; want auto-stop 1, no auto-delete: the runner asked for a stop", sb.State, sb.AutoStopInterval, sb.AutoDeleteInterval)
			}
		}
		if got.Live() && (!strings.Contains(got.LastError, "handed off to daytona") || !strings.Contains(got.LastError, "rate limited")) {
			t.Errorf("journal: %s %s: %q; want live, handed off, and why", o.in.Name, got.State, got.LastError)
		}
	}
	var b strings.Builder
	rep.Write(&b)
	if !strings.Contains(b.String(), "handed off     2 of the unresolved") || !strings.Contains(b.String(), "daytona: auto-stop 1 min") {
		t.Errorf("report does not say what was handed off:\n%s", b.String())
	}
	if n := w.srv.Throttle().Refused[daytonatest.ThrottlerSandboxLifecycle]; n != 0 {
		t.Errorf("%d deletes sent into the spent quota", n)
	}
}

// A drain with no deadline, or one whose delete is accepted, hands off
// nothing; nor does one whose deadline leaves time to try the delete
// again well before it.
func TestNoHandOffWhileTheDeleteCanStillBeSent(t *testing.T) {
	t.Parallel()
	w := newWorld(t, daytonatest.WithRateLimit(daytonatest.ThrottlerSandboxLifecycle, 1, time.Second))
	w.r.Concurrency = 1
	var intents []intent.Intent
	var ids []string
	for range 2 {
		in, sb := w.observed("started", intent.DrainDelete, true)
		intents, ids = append(intents, in), append(ids, sb.ID)
	}
	ctx, cancel := w.drainCtx(generous)
	defer cancel()
	if rep := w.r.Drain(ctx, intents); rep.Gone != 2 || rep.HandedOff != 0 {
		t.Fatalf("drain: %d gone, %d handed off; want 2 gone, none handed off", rep.Gone, rep.HandedOff)
	}
	for _, id := range ids {
		if sb := w.sandbox(id); sb.AutoStopInterval != 15 || sb.AutoDeleteInterval != -1 {
			t.Errorf("sandbox %s: auto-stop %d, auto-delete %d; want untouched", id, sb.AutoStopInterval, sb.AutoDeleteInterval)
		}
	}
}

// The replay (a new process on the journal: nothing verified yet, so each
// sandbox is read before its delete) paces its deletes by the quota too:
// when another tether spent the organization's window, the replay's first
// delete is refused and the others wait for the block's end, rather than
// each be sent into it; so the replays of a fleet's journals do not
// stampede the organization.
func TestReplayDoesNotStampede(t *testing.T) {
	t.Parallel()
	const n = 4
	w := newWorld(t, daytonatest.WithRateLimit(daytonatest.ThrottlerSandboxLifecycle, 1, time.Second))
	w.r.Concurrency = 1
	var ids []string
	var sandboxes []string
	for range n {
		in, sb := w.observed("started", intent.DrainDelete, false)
		ids, sandboxes = append(ids, in.ID), append(sandboxes, sb.ID)
	}
	w.anotherTetherDeletes(t)
	ctx, cancel := w.drainCtx(generous)
	defer cancel()
	if rep := w.r.Replay(ctx, ids); rep.Gone != n {
		t.Fatalf("replay: %d gone of %d: %+v", rep.Gone, n, rep.Unresolved)
	}
	for _, id := range sandboxes {
		if !w.sandbox(id).DeleteRequested {
			t.Errorf("sandbox %s not deleted", id)
		}
	}
	st := w.srv.Throttle()
	if refused, inWindow := st.Refused[daytonatest.ThrottlerSandboxLifecycle], st.InWindow[daytonatest.ThrottlerSandboxLifecycle]; refused != 1 || inWindow != 0 {
		t.Errorf("lifecycle: %d deletes refused, %d sent inside a window a 429 announced; want the first refused, none sent into its block", refused, inWindow)
	}
}

// anotherTetherDeletes deletes a sandbox of the organization through a
// provider of its own (another tether's), whose answers this world's
// provider does not see: it spends the lifecycle window's one delete.
func (w *world) anotherTetherDeletes(t *testing.T) {
	t.Helper()
	other := testutil.DaytonaProvider(t, w.srv, func(c *daytona.Config) { c.APIKey = apiKey })
	theirs := w.seed(w.intent(scope, intent.DrainDelete), "started")
	if err := other.Delete(context.Background(), theirs.ID); err != nil {
		t.Fatal(err)
	}
}
