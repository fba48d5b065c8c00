package reaper_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
	"github.com/tether-run/tether/spool"
)

// ApplyLease renews, then sets the lease as the auto-stop and, for
// on_drain delete only, auto-delete 0; it never touches a foreign sandbox.
func TestApplyLease(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.r.Provider = w.prov // the spy does not renew
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	l := reaper.Lease{Minutes: 2, Settle: time.Millisecond}

	del := w.intent(scope, spool.DrainDelete)
	sbDel := w.create(del)
	del = w.observe(del, sbDel.ID)
	w.srv.FailNext(daytonatest.RouteAutoDelete, 409, 1) // retried
	if err := w.r.ApplyLease(ctx, del, l); err != nil {
		t.Fatal(err)
	}
	if got := w.sandbox(sbDel.ID); got.AutoStopInterval != 2 || got.AutoDeleteInterval != 0 {
		t.Errorf("on_drain delete: auto-stop %d auto-delete %d, want 2 and 0", got.AutoStopInterval, got.AutoDeleteInterval)
	}
	if n := w.srv.CallsFor(sbDel.ID)[daytonatest.RouteLastActivity]; n != 1 {
		t.Errorf("renewals before the short auto-stop: %d, want 1", n)
	}

	stop := w.intent(scope, spool.DrainStop)
	sbStop := w.create(stop)
	stop = w.observe(stop, sbStop.ID)
	if err := w.r.ApplyLease(ctx, stop, l); err != nil {
		t.Fatal(err)
	}
	if got := w.sandbox(sbStop.ID); got.AutoStopInterval != 2 || got.AutoDeleteInterval != -1 {
		t.Errorf("on_drain stop: auto-stop %d auto-delete %d, want 2 and the server's -1 (kept when stopped)", got.AutoStopInterval, got.AutoDeleteInterval)
	}

	foreign := w.intent(scope, spool.DrainDelete)
	sbF := w.createAs(foreign.Name, map[string]string{spool.LabelOwner: "someone-else"}, nil)
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
	w.r.Provider = w.prov
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	in := w.intent(scope, spool.DrainDelete)
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
