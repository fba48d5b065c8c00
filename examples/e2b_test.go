package examples_test

import (
	"fmt"
	"os/exec"
	"testing"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/provider/e2b"
	"github.com/tether-run/tether/provider/e2b/e2btest"
)

// e2bZeroCodeRunners are the E2B zero-code examples: they know only
// E2B_API_URL and E2B_API_KEY and make the official SDK's create and kill
// calls; tether's E2B API proxy (on by default in `tether run` with E2B
// credentials) is all that covers their sandboxes.
var e2bZeroCodeRunners = []struct {
	name string
	tool string // must be on PATH, else the case is skipped
	cmd  []string
}{
	{"node", "node", []string{"node", "e2b-node/zerocode.js"}},
	{"python", "python3", []string{"python3", "e2b-python/zerocode.py"}},
}

// TestE2BZeroCodeExamples: each E2B zero-code runner creates 3 sandboxes
// with the SDK's defaults and one with metadata job=NAME, kills 2 itself,
// and then exits, is SIGKILLed, or is stopped with tether. Judged by the
// simulated E2B API's record: all 4 end killed by a request, with exactly
// one DELETE each (the runner's 2 are not killed again, the drain kills the
// other 2); each carries tether's metadata (owner, intent, tether-name),
// and the job one kept the runner's job=NAME beside it.
func TestE2BZeroCodeExamples(t *testing.T) {
	t.Parallel()
	const plain, killed = 3, 2
	for _, r := range e2bZeroCodeRunners {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			if _, err := exec.LookPath(r.tool); err != nil {
				t.Skipf("SKIP: %s is not installed: the %s E2B example did not run", r.tool, r.name)
			}
			for _, how := range []string{"exits", "killed", "stopped"} {
				t.Run(how, func(t *testing.T) {
					t.Parallel()
					w := newWorld(t)
					sim, _ := testutil.E2B(t)
					w.env = append(w.env, testutil.E2BEnv(sim)...)
					job := "e2b-" + r.name + "-" + how
					args := append(r.cmd, "--sandboxes", fmt.Sprint(plain), "--job", job, "--kill", fmt.Sprint(killed))
					if how != "exits" {
						args = append(args, "--hold")
					}
					p := w.start(args...)
					created, gone := p.zeroCodeReady()
					if len(created) != plain+1 || len(gone) != killed {
						t.Fatalf("the runner created %d and killed %d, want %d and %d; stderr:\n%s", len(created), len(gone), plain+1, killed, p.stderr)
					}
					if n := sim.Calls()[e2btest.RouteKill]; n != killed {
						t.Fatalf("E2B received %d kills before the runner ended, want the runner's %d", n, killed)
					}

					p.end(how)

					// The simulator's record: exactly the runner's sandboxes,
					// each killed by a request after exactly one DELETE.
					owner, intents := w.ownerAndIntents()
					all := sim.Sandboxes()
					if len(all) != len(created) {
						t.Errorf("the simulator holds %d sandboxes, want the runner's %d", len(all), len(created))
					}
					byIntent := map[string]intent.Intent{}
					for _, in := range intents {
						byIntent[in.ID] = in
					}
					for _, sb := range all {
						j, ok := created[sb.ID]
						if !ok {
							t.Errorf("sandbox %s (%v) was not created by the runner", sb.ID, sb.Metadata)
						}
						if sb.State != e2btest.StateKilled || sb.KillReason != e2btest.KillRequest {
							t.Errorf("sandbox %s: %s (%s); want killed by a request", sb.ID, sb.State, sb.KillReason)
						}
						if n := sim.CallsFor(sb.ID)[e2btest.RouteKill]; n != 1 {
							t.Errorf("sandbox %s received %d DELETEs, want 1", sb.ID, n)
						}
						in, ok := byIntent[sb.Metadata[intent.LabelIntent]]
						if sb.Metadata[intent.LabelOwner] != owner || !ok || sb.Metadata[e2b.MetadataName] != in.Name || in.SandboxID != sb.ID {
							t.Errorf("sandbox %s: metadata %v; want tether's owner %s, an intent of the journal, its name, and the intent observed with this id (%+v)", sb.ID, sb.Metadata, owner, in)
						}
						if (j == job) != (sb.Metadata["job"] == job) {
							t.Errorf("sandbox %s (runner's job %q): metadata %v; the runner's own metadata must be kept, and only there", sb.ID, j, sb.Metadata)
						}
					}
					if len(intents) != len(created) {
						t.Errorf("the journal holds %d intents, want one per create, %d", len(intents), len(created))
					}
					for _, in := range intents {
						if in.State != intent.Gone || in.Provider != e2b.ProviderName {
							t.Errorf("intent %s (%s) is %s of provider %q, want gone of %q", in.ID, in.Name, in.State, in.Provider, e2b.ProviderName)
						}
					}
				})
			}
		})
	}
}
