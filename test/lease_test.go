package e2e_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/tether-run/tether/internal/testutil"

	"github.com/tether-run/tether/provider/daytona/daytonatest"
	"github.com/tether-run/tether/spool"
)

// Lease mode on a sped-up clock: the simulator's minute and tether's
// (TETHER_LEASE_MINUTE, test-only) are both leaseMinute, so the default
// lease of 2 minutes lasts 3 s here (renewed every second, which leaves
// about 1.5 s for a stall of the loaded machine), and Daytona's 10 s checks run every
// leaseMinute/6.
const (
	leaseMinute  = 1500 * time.Millisecond
	leaseMinutes = 2
	leaseSpan    = leaseMinutes * leaseMinute
	// leaseBound is the documented bound from the last renewal to the
	// sandbox's auto-stop (and, for on_drain delete, its deletion): the
	// lease, plus one run of Daytona's check (10 s of a minute).
	leaseBound = leaseSpan + leaseMinute/6
)

// TestLeaseModeOutlivesNoHost: a live runner holds its sandboxes, declared
// over the socket, for 10 leases and none is stopped; then tether and the
// runner are SIGKILLed together and the journal is lost with them, as with
// a lost node. No tether process is left, yet every sandbox is stopped and
// deleted by the simulator's own timers, within the lease and one check of
// the kill.
func TestLeaseModeOutlivesNoHost(t *testing.T) {
	t.Parallel()
	w := leaseWorld(t)
	p := w.run([]string{"--lease", strconv.Itoa(leaseMinutes)}, "--sandboxes", "6", "--print-pid")
	out := p.ready()
	created := out.of("created")
	if len(created) != 6 {
		t.Fatalf("runner: %+v", out.lines)
	}
	// Two the runner releases once their leases are applied: one it says
	// it deleted (it did not), one it keeps.
	gone, kept := created[0], created[1]
	w.waitLease(ids(created, sandboxOf))
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	renewed := map[string]int{}
	for _, r := range []struct {
		l       runnerLine
		outcome string
	}{{gone, spool.OutcomeDeleted}, {kept, spool.OutcomeKept}} {
		renewed[r.l.sandbox] = w.sim.CallsFor(r.l.sandbox)[daytonatest.RouteLastActivity]
		if _, err := w.client().Release(ctx, r.l.intent, r.outcome); err != nil {
			t.Fatal(err)
		}
	}
	released := time.Now()
	testutil.Eventually(t, "the kept sandbox is handed back", func() (bool, string) {
		sb, _ := w.sim.Sandbox(kept.sandbox)
		return sb.AutoStopInterval == 15 && sb.AutoDeleteInterval == -1, fmt.Sprintf("auto-stop %d auto-delete %d", sb.AutoStopInterval, sb.AutoDeleteInterval)
	})

	w.leaseScenario(p, out, ids(created[2:], sandboxOf))

	// Neither released sandbox was renewed after its release (but for one
	// renewal already under way then).
	for id, before := range renewed {
		if after := w.sim.CallsFor(id)[daytonatest.RouteLastActivity]; after > before+1 {
			t.Errorf("sandbox %s renewed %d times after its release", id, after-before)
		}
	}
	// The one released as deleted had its lease run out under the live
	// runner: the simulator stopped and deleted it within the bound.
	var stop daytonatest.TimerEvent
	for _, e := range w.sim.TimerEvents() {
		if e.ID == gone.sandbox {
			stop = e
		}
	}
	// From the release, or from a renewal that was already under way then
	// and landed just after it.
	from := later(released, stop.LastActivity)
	if sb, _ := w.sim.Sandbox(gone.sandbox); sb.State != "destroyed" || stop.At.IsZero() || stop.At.Sub(from) > leaseBound || stop.LastActivity.Sub(released) > leaseMinute {
		t.Errorf("sandbox released as deleted: %s, stopped by its lease at %s (%s after the release, last renewed %s after it; bound %s)",
			sb.State, stop.At, stop.At.Sub(released), stop.LastActivity.Sub(released), leaseBound)
	}
	// The kept one is the runner's: nothing renews it, so Daytona stops it
	// after the backstop's 15 idle minutes (22.5 s here), never sooner,
	// and never deletes it.
	if sb, _ := w.sim.Sandbox(kept.sandbox); sb.DeleteRequested {
		t.Errorf("sandbox released as kept was deleted (%s)", sb.State)
	}
	for _, e := range w.sim.TimerEvents() {
		if e.ID == kept.sandbox && (e.Kind != daytonatest.TimerAutoStop || e.At.Sub(released) < 15*leaseMinute-leaseSpan) {
			t.Errorf("sandbox released as kept: %s %s after its release, want only an auto-stop after 15 idle minutes", e.Kind, e.At.Sub(released))
		}
	}
}

// TestLeaseModeThroughTheProxy: the same for an unchanged runner whose
// creates go through the proxy, which sets the lease in the create itself.
func TestLeaseModeThroughTheProxy(t *testing.T) {
	t.Parallel()
	w := leaseWorld(t)
	p := w.runZeroCode([]string{"--lease", strconv.Itoa(leaseMinutes)}, "create:4")
	out := p.ready()
	if created := out.of("created"); len(created) != 4 {
		t.Fatalf("runner: %+v", out.lines)
	}
	sandboxes := ids(out.of("created"), sandboxOf)
	for _, id := range sandboxes {
		// Set in the create: no setter call was needed.
		if n := w.sim.CallsFor(id)[daytonatest.RouteAutoStop]; n != 0 {
			t.Errorf("sandbox %s: %d auto-stop calls, want the lease set in the create", id, n)
		}
	}
	w.leaseScenario(p, out, sandboxes)
}

// leaseWorld is a world whose simulator and tether share the sped-up minute.
func leaseWorld(t *testing.T) *world {
	w := newWorld(t, daytonatest.WithMinute(leaseMinute))
	w.env = append(w.env, "TETHER_LEASE_MINUTE="+leaseMinute.String())
	return w
}

// leaseScenario: the runner holds the sandboxes for 10 leases, none is
// stopped; tether and runner are killed, the journal lost; the
// simulator's timers stop and delete every sandbox within the bound.
func (w *world) leaseScenario(p *proc, out runnerOut, sandboxes []string) {
	t := w.t
	t.Helper()
	w.waitLease(sandboxes)
	mine := map[string]bool{}
	for _, id := range sandboxes {
		mine[id] = true
	}
	timers := func() (out []daytonatest.TimerEvent) {
		for _, e := range w.sim.TimerEvents() {
			if mine[e.ID] {
				out = append(out, e)
			}
		}
		return out
	}

	time.Sleep(10 * leaseSpan) // the scenario itself: a runner at work for 10 leases
	for _, id := range sandboxes {
		if sb, _ := w.sim.Sandbox(id); sb.State != "started" || sb.DeleteRequested {
			t.Errorf("sandbox %s under a live runner: %s (delete requested %v), want started", id, sb.State, sb.DeleteRequested)
		}
	}
	if ev := timers(); len(ev) > 0 {
		t.Fatalf("the simulator's timers fired under a live runner: %+v", ev)
	}
	renewals := 0
	for _, id := range sandboxes {
		renewals += w.sim.CallsFor(id)[daytonatest.RouteLastActivity]
	}
	if renewals < len(sandboxes)*10 {
		t.Fatalf("%d renewals for %d sandboxes over 10 leases: the sandboxes lived without them?", renewals, len(sandboxes))
	}

	// The host is lost: tether and the runner die at once, and the journal
	// with them.
	for _, pid := range []int{p.cmd.Process.Pid, out.pid} {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill %d: %v", pid, err)
		}
	}
	killed := time.Now()
	p.wait()
	if err := os.Remove(w.journal); err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{p.cmd.Process.Pid, out.pid} {
		testutil.Eventually(t, "no tether process is left", func() (bool, string) { return dead(pid) })
	}

	testutil.Eventually(t, "Daytona's own timers delete every sandbox", func() (bool, string) {
		for _, id := range sandboxes {
			if sb, _ := w.sim.Sandbox(id); sb.State != "destroyed" {
				return false, fmt.Sprintf("sandbox %s: %s", id, sb.State)
			}
		}
		return true, ""
	})
	fired := map[string]daytonatest.TimerEvent{}
	for _, e := range timers() {
		fired[e.ID] = e
	}
	for _, id := range sandboxes {
		e, ok := fired[id]
		if !ok || e.Kind != daytonatest.TimerAutoStop {
			t.Errorf("sandbox %s: deleted, but not by its auto-stop (%+v)", id, e)
			continue
		}
		// Simulated times, computed from the last renewal the simulator
		// took: they do not depend on how loaded the machine is. A renewal
		// already on the wire when tether died may land just after the
		// kill; the bound runs from it then.
		if e.LastActivity.Sub(killed) > leaseMinute {
			t.Errorf("sandbox %s renewed %s after the kill", id, e.LastActivity.Sub(killed))
		}
		if after := e.At.Sub(later(killed, e.LastActivity)); after > leaseBound {
			t.Errorf("sandbox %s stopped %s after the kill (or its last renewal), beyond the bound %s", id, after, leaseBound)
		}
	}
}

// waitLease waits until every sandbox has lease mode's intervals.
func (w *world) waitLease(sandboxes []string) {
	w.t.Helper()
	testutil.Eventually(w.t, "the lease is applied to every sandbox", func() (bool, string) {
		for _, id := range sandboxes {
			sb, _ := w.sim.Sandbox(id)
			if sb.AutoStopInterval != leaseMinutes || sb.AutoDeleteInterval != 0 {
				return false, fmt.Sprintf("sandbox %s: auto-stop %d, auto-delete %d", id, sb.AutoStopInterval, sb.AutoDeleteInterval)
			}
		}
		return true, ""
	})
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
