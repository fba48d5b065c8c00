package reaper_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// ApplyLease renews, then sets the lease as the auto-stop and, for
// on_drain delete only, an auto-delete of the lease (not 0: the runner's
// own stop must not delete it), leaving an ephemeral one ephemeral; it
// never touches a foreign sandbox.
func TestApplyLease(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.r.Providers = provider.NewSet(w.prov) // the spy does not renew
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	l := reaper.Lease{Minutes: 2, Settle: time.Millisecond}

	del := w.intent(scope, intent.DrainDelete)
	sbDel := w.create(del)
	del = w.observe(del, sbDel.ID)
	w.srv.FailNext(daytonatest.RouteAutoDelete, 409, 1) // retried
	if err := w.r.ApplyLease(ctx, del, l); err != nil {
		t.Fatal(err)
	}
	if got := w.sandbox(sbDel.ID); got.AutoStopInterval != 2 || got.AutoDeleteInterval != 2 {
		t.Errorf("on_drain delete: auto-stop %d auto-delete %d, want 2 and 2", got.AutoStopInterval, got.AutoDeleteInterval)
	}

	eph := w.intent(scope, intent.DrainDelete)
	sbEph := w.create(eph)
	if err := w.prov.SetAutoDelete(ctx, sbEph.ID, 0); err != nil {
		t.Fatal(err)
	}
	eph = w.observe(eph, sbEph.ID)
	if err := w.r.ApplyLease(ctx, eph, l); err != nil {
		t.Fatal(err)
	}
	if got := w.sandbox(sbEph.ID); got.AutoStopInterval != 2 || got.AutoDeleteInterval != 0 || w.srv.CallsFor(sbEph.ID)[daytonatest.RouteAutoDelete] != 1 {
		t.Errorf("an ephemeral sandbox: auto-stop %d auto-delete %d (%d auto-delete calls), want 2 and 0 as the runner made it", got.AutoStopInterval, got.AutoDeleteInterval, w.srv.CallsFor(sbEph.ID)[daytonatest.RouteAutoDelete])
	}
	if n := w.srv.CallsFor(sbDel.ID)[daytonatest.RouteLastActivity]; n != 1 {
		t.Errorf("renewals before the short auto-stop: %d, want 1", n)
	}

	stop := w.intent(scope, intent.DrainStop)
	sbStop := w.create(stop)
	stop = w.observe(stop, sbStop.ID)
	if err := w.r.ApplyLease(ctx, stop, l); err != nil {
		t.Fatal(err)
	}
	if got := w.sandbox(sbStop.ID); got.AutoStopInterval != 2 || got.AutoDeleteInterval != -1 {
		t.Errorf("on_drain stop: auto-stop %d auto-delete %d, want 2 and the server's -1 (kept when stopped)", got.AutoStopInterval, got.AutoDeleteInterval)
	}

	foreign := w.intent(scope, intent.DrainDelete)
	sbF := w.createAs(foreign.Name, map[string]string{intent.LabelOwner: "someone-else"}, nil)
	foreign = w.observe(foreign, sbF.ID)
	if err := w.r.ApplyLease(ctx, foreign, l); !errors.Is(err, reaper.ErrForeign) {
		t.Fatalf("ApplyLease on a foreign sandbox: %v, want ErrForeign", err)
	}
	if got := w.sandbox(sbF.ID); got.AutoStopInterval != 15 || got.AutoDeleteInterval != -1 || w.srv.CallsFor(sbF.ID)[daytonatest.RouteLastActivity] != 0 {
		t.Errorf("a foreign sandbox was changed: %+v", got)
	}
}

// EndLease hands a kept sandbox back: the backstop's auto-stop, auto-delete
// never.
func TestEndLease(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.r.Providers = provider.NewSet(w.prov)
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	in := w.intent(scope, intent.DrainDelete)
	sb := w.create(in)
	in = w.observe(in, sb.ID)
	if err := w.r.ApplyLease(ctx, in, reaper.Lease{Minutes: 2, Settle: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if err := w.r.EndLease(ctx, in, 15); err != nil {
		t.Fatal(err)
	}
	if got := w.sandbox(sb.ID); got.AutoStopInterval != 15 || got.AutoDeleteInterval != -1 {
		t.Errorf("after EndLease: auto-stop %d auto-delete %d, want 15 and -1", got.AutoStopInterval, got.AutoDeleteInterval)
	}
}

// What tether hands back or stops on purpose is labelled to be kept, and a
// sweep of everything old and idle deletes none of it: a sandbox released
// as kept under a lease (EndLease), one the drain stopped (on_drain stop);
// a plain one beside them is swept.
func TestSweepLeavesWhatTetherKeeps(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.r.Providers = provider.NewSet(w.prov)
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()

	kept := w.intent(scope, intent.DrainDelete)
	sbKept := w.create(kept)
	kept = w.observe(kept, sbKept.ID)
	if err := w.r.ApplyLease(ctx, kept, reaper.Lease{Minutes: 2, Settle: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if err := w.r.EndLease(ctx, kept, 15); err != nil {
		t.Fatal(err)
	}

	stopped := w.intent(scope, intent.DrainStop)
	sbStopped := w.create(stopped)
	stopped = w.observe(stopped, sbStopped.ID)
	plain := w.intent(scope, intent.DrainDelete)
	sbPlain := w.create(plain)
	if rep := w.r.Drain(ctx, []intent.Intent{stopped}); rep.Stopped != 1 {
		t.Fatalf("drain: %+v", rep)
	}

	w.r.Now = func() time.Time { return time.Now().Add(time.Hour) } // all old and idle
	rep, err := w.r.Sweep(ctx, reaper.SweepRule{Owner: w.j.Owner(), OlderThan: time.Minute, IdleFor: time.Minute}, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range rep.Items {
		t.Logf("sweep: %s %s (%s)", it.Name, it.Action, it.Reason)
	}
	if rep.Count(reaper.SweepDeleted) != 1 {
		t.Errorf("swept %d, want the plain one alone", rep.Count(reaper.SweepDeleted))
	}
	for name, id := range map[string]string{"kept": sbKept.ID, "stopped": sbStopped.ID} {
		if sb := w.sandbox(id); sb.DeleteRequested || sb.Labels[reaper.LabelKeep] != "true" {
			t.Errorf("the %s sandbox: %s, delete requested %v, labels %v", name, sb.State, sb.DeleteRequested, sb.Labels)
		}
	}
	if sb := w.sandbox(sbPlain.ID); !sb.DeleteRequested {
		t.Errorf("the plain sandbox was not swept: %s", sb.State)
	}
}
