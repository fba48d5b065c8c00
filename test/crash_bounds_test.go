package e2e_test

import (
	"fmt"
	"testing"

	"github.com/tether-run/tether/internal/testutil"
)

// TestRunnerOutlivingTetherDoesNotHang: a runner leaves a process behind
// that escaped its process group (setsid) and holds tether's stdout. The
// test still sees tether exit (its exit does not wait for the end of its
// output), and the world's cleanup kills the straggler: a test never hangs
// until go test's own timeout because something it started outlived tether.
func TestRunnerOutlivingTetherDoesNotHang(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := w.start(append(w.tetherArgs("run"), "--drain-timeout", drainTimeout, "--",
		// The straggler tells its pid once it is in its own session, so
		// that the group's TERM after the runner exits cannot catch it.
		"sh", "-c", `f=$(mktemp -u); mkfifo "$f"; `+
			`setsid sh -c 'echo pid $$; echo > "$0"; exec sleep 600' "$f" & `+
			`read x < "$f"; rm -f "$f"; echo ready`)...)
	out := p.ready()
	if out.pid == 0 {
		t.Fatal("the runner did not say the straggler's pid")
	}
	if code := p.wait(); code != 0 {
		t.Fatalf("tether exited %d, want the runner's 0", code)
	}
	if gone, _ := dead(out.pid); gone {
		t.Fatalf("the straggler %d is already gone: the test proves nothing", out.pid)
	}
	if n := killMarked(w.dir); n < 1 {
		t.Fatalf("the cleanup killed %d processes, want the straggler", n)
	}
	testutil.Eventually(t, "the straggler dies", func() (bool, string) {
		gone, why := dead(out.pid)
		return gone, fmt.Sprint(why)
	})
}
