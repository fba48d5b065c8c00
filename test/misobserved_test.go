package e2e_test

import (
	"os/exec"
	"syscall"
	"testing"

	"github.com/tether-run/tether/provider/daytona/daytonatest"
	"github.com/tether-run/tether/spool"
)

// TestMistypedObservedID: a runner declares an intent, creates the sandbox
// with exactly its name and labels, then observes a mistyped id (which
// answers 404). When tether drains, the sandbox must end destroyed in the
// simulator's record, and the report counts it gone only once it is: never
// "gone" for a 404 of the wrong id while the sandbox runs.
func TestMistypedObservedID(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := w.start(append(w.tetherArgs("run"), "--drain-timeout", drainTimeout, "--", "sh", "-c", "echo ready; exec sleep 600")...)
	if l := <-p.lines; l != "ready" {
		t.Fatalf("child said %q; stderr:\n%s", l, p.stderr)
	}
	in := w.intentNew("step=build")
	off := 0
	sb, err := w.sim.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Name: in.Name, Labels: in.Labels, AutoStopInterval: &off})
	if err != nil {
		t.Fatal(err)
	}
	typo := sb.ID[:len(sb.ID)-1] + "0"
	if typo == sb.ID {
		typo = sb.ID[:len(sb.ID)-1] + "1"
	}
	if _, ok := w.sim.Sandbox(typo); ok {
		t.Fatalf("the typo %s names a sandbox", typo)
	}
	observe := exec.Command(bin.tether, "intent", "observe", "--socket", w.socket, in.ID, typo)
	observe.Env = w.env
	if out, err := observe.CombinedOutput(); err != nil {
		t.Fatalf("observe: %v\n%s", err, out)
	}
	if code := p.stop(syscall.SIGTERM); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("tether exited %d:\n%s", code, p.stderr)
	}
	// tether has exited: what the simulator says now is what was true when
	// the report was written.
	w.assertDestroyed(sb.ID)
	rep := mustReport(t, p.stderr.String())
	if rep.counts["gone"] != 1 || rep.left != 0 {
		t.Fatalf("report: gone %d, left %d; want 1, 0:\n%s", rep.counts["gone"], rep.left, p.stderr)
	}
	got := w.intents()[in.ID]
	if got.State != spool.Gone || got.SandboxID != sb.ID || len(got.Replaced) != 1 || got.Replaced[0] != typo {
		t.Fatalf("journal: %s sandbox %s replaced %v; want gone, %s, [%s]", got.State, got.SandboxID, got.Replaced, sb.ID, typo)
	}
}
