package e2e_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/intentapi"
	"github.com/tether-run/tether/internal/testutil"

	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
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
	// sandbox's auto-stop, and from its stop (or, for a stopped sandbox,
	// the last renewal) to its auto-delete (on_drain delete): the lease,
	// plus one run of Daytona's check (10 s of a minute).
	leaseBound = leaseSpan + leaseMinute/6
)

// TestLeaseModeOutlivesNoHost: a live runner holds its sandboxes, declared
// over the socket, for 10 leases and none is stopped; then tether and the
// runner are SIGKILLed together and the journal is lost with them, as with
// a lost node. No tether process is left, yet every sandbox is stopped by
// the simulator's own timers within the lease and one check of the kill,
// and deleted within another.
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
	}{{gone, intent.OutcomeDeleted}, {kept, intent.OutcomeKept}} {
		renewed[r.l.sandbox] = w.sim.CallsFor(r.l.sandbox)[daytonatest.RouteLastActivity]
		if _, err := w.client().Release(ctx, r.l.intent, r.outcome); err != nil {
			t.Fatal(err)
		}
	}
	released := time.Now()
	testutil.Eventually(t, "the kept sandbox is handed back", func() (bool, string) {
		sb, _ := w.sim.Sandbox(kept.sandbox)
		return sb.AutoStopInterval == 15 && sb.AutoDeleteInterval == -1 && sb.Labels[provider.LabelKeep] == "true",
			fmt.Sprintf("auto-stop %d auto-delete %d labels %v", sb.AutoStopInterval, sb.AutoDeleteInterval, sb.Labels)
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
	// runner: the simulator stopped it, then deleted it, within the bounds.
	var stop, del daytonatest.TimerEvent
	for _, e := range w.sim.TimerEvents() {
		switch {
		case e.ID == gone.sandbox && e.Kind == daytonatest.TimerAutoStop:
			stop = e
		case e.ID == gone.sandbox && e.Kind == daytonatest.TimerAutoDelete:
			del = e
		}
	}
	// From the release, or from a renewal that was already under way then
	// and landed just after it.
	from := later(released, stop.LastActivity)
	if sb, _ := w.sim.Sandbox(gone.sandbox); sb.State != "destroyed" || stop.At.IsZero() || stop.At.Sub(from) > leaseBound || stop.LastActivity.Sub(released) > leaseMinute ||
		del.At.IsZero() || del.At.Sub(stop.At) > leaseBound {
		t.Errorf("sandbox released as deleted: %s, stopped by its lease at %s (%s after the release, last renewed %s after it; bound %s), deleted %s after its stop",
			sb.State, stop.At, stop.At.Sub(released), stop.LastActivity.Sub(released), leaseBound, del.At.Sub(stop.At))
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
// simulator's timers stop and delete every sandbox within the bounds.
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

	// Real time, on purpose: the scenario itself is a runner at work for 10
	// leases, and what is asserted is that nothing happens meanwhile, so
	// there is no condition to wait for. The time is already the shared
	// sped-up minute (the simulator's WithMinute and the real tether's
	// TETHER_LEASE_MINUTE): the real binary's renewals run on its own
	// timers, and only living through them shows they keep the sandboxes.
	time.Sleep(10 * leaseSpan)
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

	w.loseHost(p, out, sandboxes, nil)
}

// loseHost kills tether and the runner at once and removes the journal, as
// a lost host does; then every sandbox is stopped by the simulator's own
// auto-stop within leaseBound of the kill (or its last renewal), and
// deleted by its auto-delete within leaseBound of its stop, but those in
// stopped, which the runner had stopped itself: they are deleted within
// leaseBound of the kill.
func (w *world) loseHost(p *proc, out runnerOut, sandboxes []string, stopped map[string]bool) {
	t := w.t
	t.Helper()
	mine := map[string]bool{}
	for _, id := range sandboxes {
		mine[id] = true
	}
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
	fired := map[string]map[string]daytonatest.TimerEvent{}
	for _, e := range w.sim.TimerEvents() {
		if mine[e.ID] {
			if fired[e.ID] == nil {
				fired[e.ID] = map[string]daytonatest.TimerEvent{}
			}
			fired[e.ID][e.Kind] = e
		}
	}
	for _, id := range sandboxes {
		// Simulated times, computed from the last activity the simulator
		// took: they do not depend on how loaded the machine is. A renewal
		// already on the wire when tether died may land just after the
		// kill; the bound runs from it then.
		first := fired[id][daytonatest.TimerAutoStop]
		if stopped[id] {
			first = fired[id][daytonatest.TimerAutoDelete]
		}
		if first.At.IsZero() {
			t.Errorf("sandbox %s: deleted, but not by its lease (%+v)", id, fired[id])
			continue
		}
		if first.LastActivity.Sub(killed) > leaseMinute {
			t.Errorf("sandbox %s renewed %s after the kill", id, first.LastActivity.Sub(killed))
		}
		if after := first.At.Sub(later(killed, first.LastActivity)); after > leaseBound {
			t.Errorf("sandbox %s: %s %s after the kill (or its last renewal), beyond the bound %s", id, first.Kind, after, leaseBound)
		}
		if stopped[id] {
			continue
		}
		del := fired[id][daytonatest.TimerAutoDelete]
		if del.At.IsZero() || del.At.Sub(first.At) > leaseBound {
			t.Errorf("sandbox %s: stopped at %s, deleted by its auto-delete at %s, more than %s later", id, first.At, del.At, leaseBound)
		}
	}
}

// waitLease waits until every sandbox has lease mode's intervals.
func (w *world) waitLease(sandboxes []string) {
	w.t.Helper()
	testutil.Eventually(w.t, "the lease is applied to every sandbox", func() (bool, string) {
		for _, id := range sandboxes {
			sb, _ := w.sim.Sandbox(id)
			if sb.AutoStopInterval != leaseMinutes || sb.AutoDeleteInterval != leaseMinutes {
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

// TestLeaseModeKeepsTheRunnersOwnStopAndStart: in lease mode an unchanged
// runner stops sandboxes, waits, starts one again and archives another,
// through the proxy, as it would without tether: nothing is deleted by its
// stop (the sandboxes are not ephemeral), the start finds its sandbox, and
// the archive is accepted. Then the host is lost: the running ones are
// stopped and deleted within the bounds, the one the runner left stopped
// is deleted within the lease of the loss, and the archived one stays
// archived (Daytona never deletes an archived sandbox by itself: a
// `tether drain` of the journal or `tether sweep` does).
func TestLeaseModeKeepsTheRunnersOwnStopAndStart(t *testing.T) {
	t.Parallel()
	w := leaseWorld(t)
	// Stopped for 3 leases: without renewals of the stopped ones, or with
	// auto-delete 0, they would be gone by then.
	p := w.runZeroCode([]string{"--lease", strconv.Itoa(leaseMinutes)},
		"create:4", "stop:0", "stop:1", "stop:2", "sleep:"+(3*leaseSpan).String(), "start:0", "archive:1")
	out := p.ready()
	created := ids(out.of("created"), sandboxOf)
	if len(created) != 4 || len(out.of("started")) != 1 || len(out.of("archived")) != 1 || len(out.of("stopped")) != 3 {
		t.Fatalf("runner: %+v", out.lines)
	}
	testutil.Eventually(t, "the runner's calls settled", func() (bool, string) {
		want := []string{"started", "archived", "stopped", "started"}
		for i, id := range created {
			if sb, _ := w.sim.Sandbox(id); sb.State != want[i] || sb.DeleteRequested {
				return false, fmt.Sprintf("sandbox %d: %s (delete requested %v), want %s", i, sb.State, sb.DeleteRequested, want[i])
			}
		}
		return true, ""
	})
	for i, id := range created {
		if sb, _ := w.sim.Sandbox(id); sb.AutoDeleteInterval != leaseMinutes {
			t.Errorf("sandbox %d: auto-delete %d, want the lease %d", i, sb.AutoDeleteInterval, leaseMinutes)
		}
	}
	// Real time, on purpose, in the shared sped-up minute (as in
	// leaseScenario): two leases of a runner at work, during which nothing
	// may happen to the sandbox it stopped; there is no event to wait for.
	time.Sleep(2 * leaseSpan)
	if sb, _ := w.sim.Sandbox(created[2]); sb.State != "stopped" || sb.DeleteRequested {
		t.Fatalf("the sandbox the runner stopped, under a live runner: %s (delete requested %v)", sb.State, sb.DeleteRequested)
	}

	live := []string{created[0], created[2], created[3]}
	w.loseHost(p, out, live, map[string]bool{created[2]: true})
	if sb, _ := w.sim.Sandbox(created[1]); sb.State != "archived" {
		t.Errorf("the archived sandbox after the loss: %s, want archived", sb.State)
	}
}

// TestLeaseModeKeptIsKept: a sandbox released as kept, whose hand-back
// Daytona refuses (429s on the setters) past the drain's deadline, stays
// pending in the journal; `tether drain` then hands it back. A sandbox the
// drain stopped on purpose (on_drain stop) and the kept one are labelled
// tether-keep=true, which every sweep leaves (internal/reaper's
// TestSweepLeavesWhatTetherKeeps; this world's decoys carry this tether's
// owner, so a sweep here would take them).
func TestLeaseModeKeptIsKept(t *testing.T) {
	t.Parallel()
	w := leaseWorld(t)
	p := w.run([]string{"--lease", strconv.Itoa(leaseMinutes), "--drain-timeout", "3s"}, "--sandboxes", "2", "--print-pid")
	out := p.ready()
	created := out.of("created")
	if len(created) != 2 {
		t.Fatalf("runner: %+v", out.lines)
	}
	w.waitLease(ids(created, sandboxOf))
	kept := created[0]
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	// One the drain stops on purpose, declared and created as a runner
	// would.
	toStop, err := w.client().CreateIntent(ctx, intentapi.CreateRequest{OnDrain: intent.DrainStop})
	if err != nil {
		t.Fatal(err)
	}
	sbStop, err := w.sim.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Name: toStop.Name, Labels: toStop.Labels})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.client().Observe(ctx, toStop.ID, sbStop.ID); err != nil {
		t.Fatal(err)
	}
	w.sim.SetFaults(daytonatest.Faults{Rate429: 1, RetryAfter: time.Second, Routes: []string{daytonatest.RouteAutoStop}})
	if _, err := w.client().Release(ctx, kept.intent, intent.OutcomeKept); err != nil {
		t.Fatal(err)
	}
	if code := p.stop(syscall.SIGTERM); code != 0 && code != 128+int(syscall.SIGTERM) {
		t.Fatalf("tether run: exit %d\n%s", code, p.stderr)
	}
	if !strings.Contains(p.stderr.String(), "not handed back") {
		t.Errorf("tether run did not say the hand-back was left pending:\n%s", p.stderr)
	}
	j, err := journal.OpenReadOnly(w.journal, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	in, err := j.Get(kept.intent)
	j.Close()
	if err != nil || !in.HandBackPending() {
		t.Fatalf("the kept intent after the drain: %+v, %v; want its hand-back pending", in, err)
	}

	w.sim.SetFaults(daytonatest.Faults{})
	if code, stderr := w.runTether(append(w.tetherArgs("drain"), "--drain-timeout", drainTimeout)...); code != 0 {
		t.Fatalf("tether drain: exit %d\n%s", code, stderr)
	}
	sb, _ := w.sim.Sandbox(kept.sandbox)
	if sb.DeleteRequested || sb.AutoStopInterval != 15 || sb.AutoDeleteInterval != -1 || sb.Labels[provider.LabelKeep] != "true" {
		t.Fatalf("the kept sandbox after tether drain: %s, auto-stop %d, auto-delete %d, labels %v", sb.State, sb.AutoStopInterval, sb.AutoDeleteInterval, sb.Labels)
	}
	if j, err = journal.OpenReadOnly(w.journal, time.Second); err != nil {
		t.Fatal(err)
	}
	in, err = j.Get(kept.intent)
	j.Close()
	if err != nil || !in.HandedBack {
		t.Fatalf("the kept intent after tether drain: %+v, %v; want its hand-back journaled", in, err)
	}
	if sb, _ := w.sim.Sandbox(sbStop.ID); sb.State != "stopped" || sb.Labels[provider.LabelKeep] != "true" {
		t.Fatalf("the sandbox the drain stopped: %s, labels %v", sb.State, sb.Labels)
	}
}
