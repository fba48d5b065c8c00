package e2e_test

import (
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/testutil"

	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// TestMistypedObservedID: a runner declares an intent, creates the sandbox
// with exactly its name and labels (auto-stop off), then observes a
// mistyped id, which answers 404. The sandbox must end destroyed in the
// simulator's record, and the report counts it gone only once it is: never
// "gone" for a 404 of the wrong id while the sandbox runs. Two ways: the
// backstop, reading the id just observed, corrects it at once (and sets the
// real sandbox's auto-stop while the runner lives); or, when it could not
// (the provider refused it then), the drain does.
func TestMistypedObservedID(t *testing.T) {
	t.Parallel()
	for _, backstopFails := range []bool{false, true} {
		t.Run(fmt.Sprintf("backstop fails %v", backstopFails), func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			p := w.start(append(w.tetherArgs("run"), "--drain-timeout", drainTimeout, "--", "sh", "-c", "echo ready; exec sleep 600")...)
			if l := p.line(); l != "ready" {
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
			if backstopFails {
				// The key is refused while the backstop reads: it gives
				// up (a configuration error) without correcting anything.
				w.sim.RemoveKey(daytonatest.DefaultKey)
			}
			observe := exec.Command(bin.tether, "intent", "observe", "--socket", w.socket, in.ID, typo)
			observe.Env = w.env
			if out, err := observe.CombinedOutput(); err != nil {
				t.Fatalf("observe: %v\n%s", err, out)
			}
			if backstopFails {
				testutil.Eventually(t, "the backstop to give up", func() (bool, string) {
					return strings.Contains(p.stderr.String(), "auto-stop backstop not applied"), p.stderr.String()
				})
				w.sim.AddKey(daytonatest.DefaultKey, daytonatest.DefaultOrg)
				if got := w.intentOf(in.ID); got.SandboxID != typo {
					t.Fatalf("intent observed %s, want the typo %s still", got.SandboxID, typo)
				}
			} else {
				testutil.Eventually(t, "the backstop to correct the id and set the auto-stop", func() (bool, string) {
					got, _ := w.sim.Sandbox(sb.ID)
					in := w.intentOf(in.ID)
					return in.SandboxID == sb.ID && got.AutoStopInterval != 0, fmt.Sprintf("intent observed %s, auto-stop %d", in.SandboxID, got.AutoStopInterval)
				})
			}
			if code := p.stop(syscall.SIGTERM); code != 128+int(syscall.SIGTERM) {
				t.Fatalf("tether exited %d:\n%s", code, p.stderr)
			}
			// tether has exited: what the simulator says now is what was
			// true when the report was written.
			w.assertDestroyed(sb.ID)
			rep := mustReport(t, p.stderr.String())
			if rep.counts["gone"] != 1 || rep.left != 0 {
				t.Fatalf("report: gone %d, left %d; want 1, 0:\n%s", rep.counts["gone"], rep.left, p.stderr)
			}
			got := w.intents()[in.ID]
			if got.State != intent.Gone || got.SandboxID != sb.ID || len(got.Replaced) != 1 || got.Replaced[0] != typo {
				t.Fatalf("journal: %s sandbox %s replaced %v; want gone, %s, [%s]", got.State, got.SandboxID, got.Replaced, sb.ID, typo)
			}
		})
	}
}
