package reaper_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// The real Daytona server's behaviours (issue 12), each reproduced by the
// simulator, met by the reaper through the real api-client-go, and judged
// by the simulator's own record of the sandbox.

// seed plants the intent's sandbox (its name, its labels) in a state.
func (w *world) seed(in intent.Intent, state string) daytonatest.Sandbox {
	w.t.Helper()
	sb, err := w.srv.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Name: in.Name, Labels: in.Labels, State: state})
	if err != nil {
		w.t.Fatal(err)
	}
	return sb
}

// observed declares an intent, plants its sandbox in state and observes it,
// as a runner would; verify runs the backstop's read, as tether does on
// every observe.
func (w *world) observed(state string, onDrain intent.OnDrain, verify bool) (intent.Intent, daytonatest.Sandbox) {
	w.t.Helper()
	in := w.intent(scope, onDrain)
	sb := w.seed(in, state)
	in = w.observe(in, sb.ID)
	if verify {
		ctx, cancel := context.WithTimeout(context.Background(), generous)
		defer cancel()
		if err := w.r.Backstop(ctx, in); err != nil {
			w.t.Fatal(err)
		}
	}
	return in, sb
}

func (w *world) assertGone(in intent.Intent, out intent.Intent, err error, sandboxID string) {
	w.t.Helper()
	if err != nil || out.State != intent.Gone {
		w.t.Fatalf("Resolve = %s, %v; want gone", out.State, err)
	}
	testutil.WaitFor(w.t, "the simulator to finish the destroy", func() bool { return w.sandbox(sandboxID).State == "destroyed" })
	if got := w.journaled(in.ID); got.State != intent.Gone {
		w.t.Fatalf("journal says %s", got.State)
	}
}

// 1. A delete renames at once and the state lags: a rename to
// DESTROYED_<our name>_<ms> of our id is our delete accepted; tether
// confirms until 404 and never deletes again.
func TestRenamedWhileTheStateLags(t *testing.T) {
	t.Parallel()
	for _, state := range []string{"archived", "archiving", "paused", "stopped", "started"} {
		t.Run(state, func(t *testing.T) {
			w := newWorld(t, daytonatest.WithDestroyLag(300*time.Millisecond))
			in, sb := w.observed(state, intent.DrainDelete, false)
			if err := w.srv.Hold(sb.ID, state, 0); err != nil { // archiving would move on
				t.Fatal(err)
			}
			// Reads while the state lags behind the rename.
			var lagging []string
			w.spy.setOnDelete(nil)
			out, err := w.resolve(in, generous)
			w.assertGone(in, out, err, sb.ID)
			for _, c := range w.spy.deleteCalls() {
				if c.err != nil {
					lagging = append(lagging, c.err.Error())
				}
			}
			if n := len(w.spy.deleteCalls()); n != 1 || len(lagging) != 0 {
				t.Fatalf("%d deletes (%v), want exactly 1 accepted", n, lagging)
			}
			if calls := w.srv.CallsFor(sb.ID); calls[daytonatest.RouteGet] < 2 {
				t.Errorf("reads %v: the lag should have been read at least once before the 404", calls)
			}
		})
	}
}

// The runner (or anyone) deleted the sandbox itself, and its state still
// lags: the intent is not foreign, no second DELETE (409) is sent, it is
// confirmed gone.
func TestDeletedByTheRunnerWhileTheStateLags(t *testing.T) {
	t.Parallel()
	w := newWorld(t, daytonatest.WithDestroyLag(300*time.Millisecond))
	in, sb := w.observed("archived", intent.DrainDelete, false)
	if err := w.prov.Delete(context.Background(), sb.ID); err != nil {
		t.Fatal(err)
	}
	if got := w.sandbox(sb.ID); got.State != "archived" || !strings.HasPrefix(got.Name, "DESTROYED_"+in.Name+"_") {
		t.Fatalf("the simulator shows %s %s, want renamed and still archived", got.Name, got.State)
	}
	out, err := w.resolve(in, generous)
	w.assertGone(in, out, err, sb.ID)
	if calls := w.spy.deleteCalls(); len(calls) != 0 {
		t.Errorf("tether sent %d deletes of a sandbox whose delete was accepted (first: %v)", len(calls), calls[0].err)
	}
}

// 2. 404 is not always gone: one spurious 404 of an observed id is read
// again; the sandbox is found, deleted and confirmed.
func TestSpurious404IsReadAgain(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	in, sb := w.observed("started", intent.DrainDelete, false)
	w.srv.Inject(daytonatest.RouteGet, 1, daytonatest.Scripted{Status: 404})
	out, err := w.resolve(in, generous)
	w.assertGone(in, out, err, sb.ID)
	if !w.sandbox(sb.ID).DeleteRequested || !w.spy.deleted(sb.ID) {
		t.Fatal("closed as gone on a spurious 404 without deleting the sandbox")
	}

	// On the delete too: the access guard answers the DELETE 404.
	w2 := newWorld(t)
	in2, sb2 := w2.observed("started", intent.DrainDelete, true)
	w2.srv.Inject(daytonatest.RouteDelete, 1, daytonatest.Scripted{Status: 404})
	out, err = w2.resolve(in2, generous)
	w2.assertGone(in2, out, err, sb2.ID)

	// A sandbox really gone answers 404 twice: gone, after two reads.
	w3 := newWorld(t)
	in3, sb3 := w3.observed("started", intent.DrainDelete, false)
	if err := w3.prov.Delete(context.Background(), sb3.ID); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the destroy", func() bool { return w3.sandbox(sb3.ID).State == "destroyed" })
	out, err = w3.resolve(in3, generous)
	w3.assertGone(in3, out, err, sb3.ID)
	if n := w3.srv.CallsFor(sb3.ID)[daytonatest.RouteGet]; n != 2 {
		t.Errorf("%d reads of a vanished sandbox, want 2 (a 404 confirmed by a second)", n)
	}
}

// 3. Rate limits: an answer that says the lifecycle quota is spent holds the
// next delete back until the reset, so it is not refused.
func TestSpentQuotaIsWaitedOut(t *testing.T) {
	t.Parallel()
	w := newWorld(t, daytonatest.WithRateLimit(daytonatest.ThrottlerSandboxLifecycle, 1, time.Second))
	in, sb := w.observed("started", intent.DrainDelete, true)
	other := w.intent(scope, intent.DrainDelete)
	first := w.seed(other, "started")
	// Through the reaper's own provider: the answer says remaining 0.
	spentAt := time.Now()
	if err := w.prov.Delete(context.Background(), first.ID); err != nil {
		t.Fatal(err)
	}
	out, err := w.resolve(in, generous)
	w.assertGone(in, out, err, sb.ID)
	calls := w.spy.deleteCalls()
	if len(calls) != 1 || calls[0].err != nil {
		t.Fatalf("deletes %+v, want one, accepted", calls)
	}
	// A lower bound only: a slow machine can only wait longer.
	if gap := calls[0].at.Sub(spentAt); gap < time.Second {
		t.Errorf("the delete went %s after the quota was spent, inside its 1 s window", gap)
	}
	if st := w.srv.Throttle(); st.Refused[daytonatest.ThrottlerSandboxLifecycle] != 0 || st.InWindow[daytonatest.ThrottlerSandboxLifecycle] != 0 {
		t.Errorf("throttle %+v: want nothing refused", st)
	}
}

// A drain against a quota that runs out: once the organization's lifecycle
// quota is spent for longer than the drain has left, each intent sends at
// most one delete (no retry storm into the spent quota, which the live
// runners share), the ones the quota let through are confirmed gone, and
// the rest are reported live with the reason, their sandboxes untouched.
func TestDrainIntoASpentQuota(t *testing.T) {
	t.Parallel()
	const quota = 4
	w := newWorld(t, daytonatest.WithRateLimit(daytonatest.ThrottlerSandboxLifecycle, quota, time.Minute))
	w.r.Concurrency = 16
	var intents []intent.Intent
	var ids []string
	for range 40 {
		in, sb := w.observed("started", intent.DrainDelete, true)
		intents, ids = append(intents, in), append(ids, sb.ID)
	}
	ctx, cancel := w.drainCtx(5 * time.Second)
	defer cancel()
	rep := w.r.Drain(ctx, intents)
	if rep.Gone != quota || rep.Live() != len(intents)-quota {
		t.Fatalf("drain: %d gone, %d live; want %d gone (the quota) and the rest live", rep.Gone, rep.Live(), quota)
	}
	for _, it := range rep.Unresolved {
		if !strings.Contains(it.LastError, "rate limited") {
			t.Errorf("unresolved %s: %q does not say it was rate limited", it.Name, it.LastError)
		}
	}
	destroyed := 0
	for _, id := range ids {
		got := w.sandbox(id)
		if got.DeleteRequested {
			destroyed++
		}
		if n := w.srv.CallsFor(id)[daytonatest.RouteDelete]; n > 1 {
			t.Errorf("sandbox %s: %d deletes into a spent quota", id, n)
		}
	}
	if destroyed != quota {
		t.Errorf("%d sandboxes deleted, want %d", destroyed, quota)
	}
	st := w.srv.Throttle()
	t.Logf("lifecycle: %d deletes, %d refused, %d inside throttle windows; concurrency now %d",
		w.srv.Calls()[daytonatest.RouteDelete], st.Refused[daytonatest.ThrottlerSandboxLifecycle], st.InWindow[daytonatest.ThrottlerSandboxLifecycle], w.r.CurrentConcurrency())
}

// 4. A transient 403 is retried; a key without the delete permission is a
// configuration error, reported with the permission's name, once.
func TestForbiddenDeletes(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	in, sb := w.observed("started", intent.DrainDelete, true)
	w.srv.Inject(daytonatest.RouteDelete, 1, daytonatest.Scripted{Status: 403})
	out, err := w.resolve(in, generous)
	w.assertGone(in, out, err, sb.ID)

	w2 := newWorld(t)
	w2.srv.AddKeyWithPermissions(apiKey, daytonatest.DefaultOrg, daytonatest.PermWriteSandboxes)
	in2, sb2 := w2.observed("started", intent.DrainDelete, true)
	out, err = w2.resolve(in2, generous)
	if !errors.Is(err, provider.ErrPermission) || !out.Live() {
		t.Fatalf("Resolve = %s, %v; want live with a permission error", out.State, err)
	}
	last := w2.journaled(in2.ID).LastError
	if !strings.Contains(last, "configuration error") || !strings.Contains(last, "delete:sandboxes") {
		t.Errorf("journal's last error %q does not name the missing permission", last)
	}
	if n := w2.srv.Calls()[daytonatest.RouteDelete]; n != 1 {
		t.Errorf("%d deletes, want 1 (no retry of a missing permission)", n)
	}
	if got := w2.sandbox(sb2.ID); got.DeleteRequested {
		t.Fatal("the sandbox was deleted without the permission")
	}
}

// 5. on_drain=stop: a sandbox already stopped or archived is done (the 400
// is not retried); an errored one is reported at once.
func TestStopOfStoppedAndErrored(t *testing.T) {
	t.Parallel()
	for _, state := range []string{"stopped", "archived"} {
		w := newWorld(t)
		in, sb := w.observed(state, intent.DrainStop, true)
		out, err := w.resolve(in, generous)
		if err != nil || out.State != intent.Stopped {
			t.Fatalf("%s: Resolve = %s, %v; want stopped", state, out.State, err)
		}
		if got := w.sandbox(sb.ID); got.State != state || got.DeleteRequested {
			t.Errorf("%s: the simulator shows %s", state, got.State)
		}
		if n := w.srv.Calls()[daytonatest.RouteStop]; n > 1 {
			t.Errorf("%s: %d stops, want at most 1", state, n)
		}
	}
	w := newWorld(t)
	in, sb := w.observed("error", intent.DrainStop, true)
	out, err := w.resolve(in, generous)
	if !errors.Is(err, provider.ErrErrored) || !out.Live() {
		t.Fatalf("errored: Resolve = %s, %v; want live, reported as errored", out.State, err)
	}
	if n := w.srv.Calls()[daytonatest.RouteStop]; n != 1 {
		t.Errorf("%d stops of an errored sandbox, want 1", n)
	}
	if got := w.sandbox(sb.ID); got.State != "error" {
		t.Errorf("the simulator shows %s", got.State)
	}
}

// 6. A second DELETE of a sandbox being deleted answers 409: tether reads,
// sees the rename, and confirms instead of retrying the delete.
func TestSecondDeleteConflict(t *testing.T) {
	t.Parallel()
	// Long enough that tether's delete, sent right after the runner's,
	// still meets the sandbox being deleted on a loaded machine (at 200 ms
	// its answer once came after the destroy).
	w := newWorld(t, daytonatest.WithDestroyLag(2*time.Second))
	in, sb := w.observed("started", intent.DrainDelete, true)
	var once sync.Once
	w.spy.setOnDelete(func(id string) {
		// The runner's own delete lands just before tether's.
		once.Do(func() {
			if err := w.prov.Delete(context.Background(), id); err != nil {
				t.Error(err)
			}
		})
	})
	out, err := w.resolve(in, generous)
	w.assertGone(in, out, err, sb.ID)
	calls := w.spy.deleteCalls()
	if len(calls) != 1 || !errors.Is(calls[0].err, provider.ErrConflict) {
		t.Fatalf("tether's deletes: %+v, want one, answered 409", calls)
	}
}

// 7. Delete of an errored sandbox: 200, and 404 at once. Delete with live
// forks: 400, nothing done; the delete is sent again, without a read,
// until the forks are gone (here one the journal does not know, deleted
// by hand), and the parent then ends gone.
func TestDeleteErroredAndForked(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	in, sb := w.observed("error", intent.DrainDelete, false)
	out, err := w.resolve(in, generous)
	w.assertGone(in, out, err, sb.ID)

	w2 := newWorld(t)
	in2, parent := w2.observed("started", intent.DrainDelete, true)
	fork, err := w2.srv.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Name: "fork-of-it", ForkOf: parent.ID})
	if err != nil {
		t.Fatal(err)
	}
	out, err = w2.resolve(in2, time.Second)
	if !errors.Is(err, provider.ErrHasForks) || !out.Live() || !strings.Contains(w2.journaled(in2.ID).LastError, "fork") {
		t.Fatalf("Resolve = %s, %v; want live, waiting for the fork", out.State, err)
	}
	if n := w2.srv.Calls()[daytonatest.RouteDelete]; n < 2 {
		t.Errorf("%d deletes, want the refused delete sent again", n)
	}
	if w2.sandbox(parent.ID).DeleteRequested {
		t.Fatal("the parent was deleted while its fork lived")
	}
	if err := w2.prov.Delete(context.Background(), fork.ID); err != nil {
		t.Fatal(err)
	}
	out, err = w2.resolve(out, generous)
	w2.assertGone(in2, out, err, parent.ID)
}

// 8. A create answered 400 "Sandbox failed to start" left a sandbox in
// state error: the failed-create path finds it by name and deletes it.
func TestFailedStartIsFoundAndDeleted(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	in := w.intent(scope, intent.DrainDelete)
	w.srv.Inject(daytonatest.RouteCreate, 1, daytonatest.Scripted{FailStart: true})
	if _, err := w.prov.Create(context.Background(), in.Name, in.Labels, nil); !errors.Is(err, provider.ErrRefused) || !strings.Contains(err.Error(), "Sandbox failed to start") {
		t.Fatalf("create: %v, want 400 Sandbox failed to start", err)
	}
	var id string
	for _, sb := range w.srv.Sandboxes() {
		if sb.Name == in.Name {
			id = sb.ID
		}
	}
	if id == "" || w.sandbox(id).State != "error" {
		t.Fatal("the failed create left no sandbox in error")
	}
	out, err := w.resolve(in, generous)
	w.assertGone(in, out, err, id)
	if out.SandboxID != id {
		t.Errorf("journaled sandbox %q, want %s", out.SandboxID, id)
	}
}

// 11. The healthy path: a drain of sandboxes whose ids the backstop
// verified spends one read and one delete per sandbox, counted by the
// simulator.
func TestHealthyPathCosts(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	var intents []intent.Intent
	var ids []string
	for range 20 {
		in, sb := w.observed("started", intent.DrainDelete, true)
		intents, ids = append(intents, in), append(ids, sb.ID)
	}
	before := map[string]map[string]int{}
	for _, id := range ids {
		before[id] = w.srv.CallsFor(id)
	}
	ctx, cancel := w.drainCtx(generous)
	defer cancel()
	if rep := w.r.Drain(ctx, intents); rep.Gone != len(intents) {
		t.Fatalf("drain: %d gone: %+v", rep.Gone, rep.Unresolved)
	}
	for i, id := range ids {
		after := w.srv.CallsFor(id)
		reads := after[daytonatest.RouteGet] - before[id][daytonatest.RouteGet]
		deletes := after[daytonatest.RouteDelete] - before[id][daytonatest.RouteDelete]
		if reads != 1 || deletes != 1 {
			t.Errorf("sandbox %d: %d reads and %d deletes during the drain, want 1 and 1", i, reads, deletes)
		}
		if n := sum(w.srv.CallsFor(intents[i].Name)); n != 0 {
			t.Errorf("sandbox %d: %d calls by name", i, n)
		}
		if got := w.sandbox(id); got.State != "destroyed" {
			t.Errorf("sandbox %d is %s", i, got.State)
		}
	}
}

// 10. An accepted delete is never undone in Daytona's API (a start or
// recover of a sandbox whose desired state is destroyed is refused; every
// action re-checks it: sandbox.service.ts:2064-2084, sandbox.manager.ts:
// 1010-1119 at v0.190.0), but a destroy can fail on the runner: the
// sandbox turns error, is hidden (404; listed only with
// includeErroredDeleted) and is never tried again (Faults.DestroyFail).
// What tether does: its accepted delete's 404 is gone, as Daytona itself
// says, with no read more on the healthy path (which the 404 of a
// destroyed sandbox is too); the sweep, which lists errored-deleted
// sandboxes, reports it and says that Daytona will not retry it.
func TestDestroyFailedOnTheRunner(t *testing.T) {
	t.Parallel()
	w := newWorld(t, daytonatest.WithFaults(daytonatest.Faults{DestroyFail: 1}))
	in, sb := w.observed("started", intent.DrainDelete, true)
	out, err := w.resolve(in, generous)
	if err != nil || out.State != intent.Gone {
		t.Fatalf("Resolve = %s, %v; want gone, as Daytona shows it", out.State, err)
	}
	rec := w.sandbox(sb.ID)
	if rec.State != "error" || rec.DesiredState != "destroyed" || rec.Pending || !rec.DeleteRequested {
		t.Fatalf("simulator: %+v; want error, desired destroyed, not pending", rec)
	}
	if _, err := w.prov.Get(context.Background(), sb.ID); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("GET of the failed destroy: %v, want 404", err)
	}
	rep, err := (&reaper.Reaper{Providers: provider.NewSet(w.prov)}).Sweep(context.Background(), reaper.SweepRule{OlderThan: time.Nanosecond, IdleFor: time.Nanosecond}, false)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, it := range rep.Items {
		if it.ID == sb.ID {
			found = true
			if it.Action != reaper.SweepInProgress || !strings.Contains(it.Reason, "never retries") {
				t.Errorf("sweep item %+v: want it reported as a destroy Daytona never retries", it)
			}
		}
	}
	if !found {
		t.Errorf("the sweep did not list it: %+v", rep.Items)
	}
}
