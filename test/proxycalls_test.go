package e2e_test

import (
	"syscall"
	"testing"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// The calls an unchanged runner makes after its creates, through the
// official api-client-go under the real binary: it replaces the labels of
// its sandboxes, forks two of them and turns their auto-stop off. Whether
// the runner is SIGKILLed or tether gets SIGTERM, every sandbox it made,
// forks included, ends deleted, and nothing else is touched.
func TestProxyCallsAfterTheCreate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		stop func(w *world, p *proc, out runnerOut) int
		want int
	}{
		{"runner SIGKILLed", func(w *world, p *proc, out runnerOut) int {
			if err := syscall.Kill(out.pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			return p.wait()
		}, 128 + int(syscall.SIGKILL)},
		{"tether SIGTERMed", func(w *world, p *proc, out runnerOut) int {
			return p.stop(syscall.SIGTERM)
		}, 128 + int(syscall.SIGTERM)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Daytona forks VM sandboxes only (sandbox.service.ts:1093-1095).
			w := newWorld(t, daytonatest.WithSnapshotClass("daytonaio/vm:e2e", daytonatest.ClassLinuxVM))
			bystander, err := w.sim.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Name: "not-the-runners", Labels: map[string]string{"runner": "zero-code"}})
			if err != nil {
				t.Fatal(err)
			}
			p := w.runZeroCode([]string{"--drain-timeout", drainTimeout}, "snapshot:daytonaio/vm:e2e", "create:3", "labels:3", "fork:2", "autostop0:3")
			out := p.ready()
			created, forked := out.of("created"), out.of("forked")
			if len(created) != 3 || len(forked) != 2 || len(out.of("relabelled")) != 3 || len(out.of("autostop")) != 3 {
				t.Fatalf("runner: %+v", out.lines)
			}
			// Before the end: tether's labels survived the replacements,
			// the setters met the backstop, the forks are their own.
			for _, l := range append(created, forked...) {
				sb, _ := w.sim.Sandbox(l.sandbox)
				if sb.Labels[intent.LabelOwner] != w.owner || sb.Labels["e2e"] != "yes" || sb.Labels[intent.LabelIntent] == "" {
					t.Errorf("sandbox %s labels %v: tether's labels lost", l.sandbox, sb.Labels)
				}
				if sb.AutoStopInterval == 0 {
					t.Errorf("sandbox %s runs with auto-stop off", l.sandbox)
				}
			}
			for _, l := range created {
				if sb, _ := w.sim.Sandbox(l.sandbox); sb.Labels["runner"] != "relabelled" {
					t.Errorf("sandbox %s labels %v: the runner's replacement lost", l.sandbox, sb.Labels)
				}
			}
			if code := tc.stop(w, p, out); code != tc.want {
				t.Fatalf("tether exited %d, want %d; stderr:\n%s", code, tc.want, p.stderr)
			}
			w.assertDestroyed(ids(append(created, forked...), func(l runnerLine) string { return l.sandbox })...)
			if sb, _ := w.sim.Sandbox(bystander.ID); sb.DeleteRequested || sb.State != "started" {
				t.Errorf("a sandbox the runner never made was touched: %+v", sb)
			}
			// Daytona's answers proved each sandbox ours: the drain spends
			// one read (the confirmation) and one delete on the sandbox
			// that is neither a parent (whose delete may meet it forking)
			// nor a fork (whose delete may meet it still creating, on a
			// loaded machine: a 409, a read, the delete again).
			for _, l := range created[2:] {
				if c := w.sim.CallsFor(l.sandbox); c[daytonatest.RouteGet] != 1 || c[daytonatest.RouteDelete] != 1 {
					t.Errorf("sandbox %s cost %d reads and %d deletes, want 1 and 1", l.sandbox, c[daytonatest.RouteGet], c[daytonatest.RouteDelete])
				}
			}
			for _, l := range forked {
				if c := w.sim.CallsFor(l.sandbox); c[daytonatest.RouteDelete] > 2 || c[daytonatest.RouteGet] > c[daytonatest.RouteDelete] {
					t.Errorf("fork %s cost %d reads and %d deletes, want one of each and at most one more of each after a 409", l.sandbox, c[daytonatest.RouteGet], c[daytonatest.RouteDelete])
				}
			}
			made := map[string]bool{}
			for _, l := range append(created, forked...) {
				made[l.sandbox] = true
			}
			for _, sb := range w.sim.Sandboxes() {
				if !made[sb.ID] && sb.DeleteRequested {
					t.Errorf("sandbox %s (%s), not the runner's, was deleted", sb.ID, sb.Name)
				}
			}
			// The drain deletes each fork before its parent; a delete that
			// meets a sandbox still settling (a fork creating, its parent
			// forking: 409, nothing done) is sent again.
			if n := w.sim.Calls()[daytonatest.RouteDelete]; n < 5 || n > 7 {
				t.Errorf("Daytona received %d deletes, want 5 to 7", n)
			}
			recorded := w.intents()
			forks := 0
			for _, in := range recorded {
				if in.State != intent.Gone {
					t.Errorf("intent %s (%s): %s (%s)", in.ID, in.Name, in.State, in.LastError)
				}
				if in.ParentIntent != "" {
					forks++
				}
			}
			if len(recorded) != 5 || forks != 2 {
				t.Errorf("journal: %d intents, %d forks; want 5 and 2", len(recorded), forks)
			}
			rep := mustReport(t, p.stderr.String())
			if rep.total != 5 || rep.left != 0 || rep.counts["gone"] != 5 {
				t.Errorf("report: %d intents, %d left, counts %v; want 5 gone", rep.total, rep.left, rep.counts)
			}
		})
	}
}

// A create refused 409 (the name is taken, nothing stored) leaves no
// phantom: its intent closes at once as never-created, the drain has the
// one real sandbox to delete, and --on-unresolved=exit-code exits 0 after
// the runner's clean exit.
func TestProxyRefusedCreateLeavesNoPhantom(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := w.runZeroCode([]string{"--drain-timeout", drainTimeout, "--on-unresolved", "exit-code"}, "named:agent-1", "clash:agent-1", "exit")
	out := p.ready()
	if c, f := out.of("created"), out.of("failed"); len(c) != 1 || len(f) != 1 || f[0].name != "409" {
		t.Fatalf("runner: %+v", out.lines)
	}
	if code := p.wait(); code != 0 {
		t.Fatalf("tether exited %d, want 0; stderr:\n%s", code, p.stderr)
	}
	w.assertDestroyed(out.of("created")[0].sandbox)
	rep := mustReport(t, p.stderr.String())
	if rep.total != 1 || rep.left != 0 || rep.counts["gone"] != 1 {
		t.Errorf("report: %d intents, %d left, counts %v; want the one sandbox gone", rep.total, rep.left, rep.counts)
	}
	never := 0
	for _, in := range w.intents() {
		if in.State == intent.NeverCreated {
			never++
		}
	}
	if never != 1 {
		t.Errorf("%d never-created intents, want the refused create's", never)
	}
}
