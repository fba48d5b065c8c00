package e2e_test

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// Lease mode on a sped-up clock: the simulator's minute and tether's
// (TETHER_LEASE_MINUTE, test-only) are both leaseMinute, so the default
// lease of 2 minutes lasts 2 s here and Daytona's 10 s checks run every
// leaseMinute/6.
const (
	leaseMinute  = time.Second
	leaseMinutes = 2
	leaseSpan    = leaseMinutes * leaseMinute
	// leaseBound is the documented bound from the last renewal to the
	// sandbox's auto-stop (and, for on_drain delete, its deletion): the
	// lease, plus one run of Daytona's check (10 s of a minute).
	leaseBound = leaseSpan + leaseMinute/6
)

// TestLeaseModeOutlivesNoHost: a live runner holds its sandboxes for 10
// leases and none is stopped; then tether and the runner are SIGKILLed
// together and the journal is lost with them, as with a lost node. No
// tether process is left, yet every sandbox is stopped and deleted by the
// simulator's own timers, within the lease and one check of the kill.
func TestLeaseModeOutlivesNoHost(t *testing.T) {
	t.Parallel()
	w := newWorld(t, daytonatest.WithMinute(leaseMinute))
	w.env = append(w.env, "TETHER_LEASE_MINUTE="+leaseMinute.String())
	p := w.run([]string{"--lease", strconv.Itoa(leaseMinutes)}, "--sandboxes", "6", "--print-pid")
	out := p.ready()
	created := out.of("created")
	if len(created) != 6 {
		t.Fatalf("runner: %+v", out.lines)
	}
	sandboxes := ids(created, sandboxOf)
	eventually(t, "the lease is applied to every sandbox", func() (bool, string) {
		for _, id := range sandboxes {
			sb, _ := w.sim.Sandbox(id)
			if sb.AutoStopInterval != leaseMinutes || sb.AutoDeleteInterval != 0 {
				return false, fmt.Sprintf("sandbox %s: auto-stop %d, auto-delete %d", id, sb.AutoStopInterval, sb.AutoDeleteInterval)
			}
		}
		return true, ""
	})

	time.Sleep(10 * leaseSpan) // the scenario itself: a runner at work for 10 leases
	for _, id := range sandboxes {
		if sb, _ := w.sim.Sandbox(id); sb.State != "started" || sb.DeleteRequested {
			t.Errorf("sandbox %s under a live runner: %s (delete requested %v), want started", id, sb.State, sb.DeleteRequested)
		}
	}
	if ev := w.sim.TimerEvents(); len(ev) > 0 {
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
		eventually(t, "no tether process is left", func() (bool, string) { return dead(pid) })
	}

	eventually(t, "Daytona's own timers delete every sandbox", func() (bool, string) {
		for _, id := range sandboxes {
			if sb, _ := w.sim.Sandbox(id); sb.State != "destroyed" {
				return false, fmt.Sprintf("sandbox %s: %s", id, sb.State)
			}
		}
		return true, ""
	})
	fired := map[string]daytonatest.TimerEvent{}
	for _, e := range w.sim.TimerEvents() {
		fired[e.ID] = e
	}
	for _, id := range sandboxes {
		e, ok := fired[id]
		if !ok || e.Kind != daytonatest.TimerAutoStop {
			t.Errorf("sandbox %s: deleted, but not by its auto-stop (%+v)", id, e)
			continue
		}
		// Simulated times, computed from the last renewal the simulator
		// took: they do not depend on how loaded the machine is.
		if after := e.At.Sub(killed); after > leaseBound {
			t.Errorf("sandbox %s stopped %s after the kill, beyond the bound %s", id, after, leaseBound)
		}
	}
}
