package examples_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// zeroCodeRunners are the zero-code variants: they know only
// DAYTONA_API_URL and DAYTONA_API_KEY; tether's Daytona API proxy (on by
// default in `tether run`) is all that covers their sandboxes.
var zeroCodeRunners = []struct {
	name string
	tool string // must be on PATH, else the case is skipped
	cmd  []string
}{
	{"node", "node", []string{"node", "node/zerocode.js"}},
	{"python", "python3", []string{"python3", "python/zerocode.py"}},
}

// TestZeroCodeExamples: each zero-code runner creates 3 sandboxes with
// neither name nor labels and one with its own name and labels, deletes 2
// itself, and then exits, is SIGKILLed, or is stopped with tether. Judged by
// the simulator's record: all 4 end destroyed with exactly one DELETE each
// (the runner's 2 are not deleted again, the drain deletes the other 2), and
// the named one kept its name and label beside tether's ownership labels.
//
// The simulator lags each destroy as Daytona does (GET shows a deleted
// sandbox renamed but in its old state until the destroy action runs), so
// the drain meets the runner's deletes still under way: a drain that sent
// them a second DELETE would fail the count.
func TestZeroCodeExamples(t *testing.T) {
	t.Parallel()
	const unnamed, deleted = 3, 2
	for _, r := range zeroCodeRunners {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			if _, err := exec.LookPath(r.tool); err != nil {
				t.Skipf("SKIP: %s is not installed: the %s zero-code example did not run", r.tool, r.name)
			}
			// exits: on its own; killed: SIGKILL to the runner (a crash, the
			// OOM killer); stopped: SIGTERM to tether (docker stop), forwarded.
			for _, how := range []string{"exits", "killed", "stopped"} {
				t.Run(how, func(t *testing.T) {
					t.Parallel()
					w := newWorld(t, daytonatest.WithDestroyLag(destroyLag))
					name := "zerocode-" + r.name + "-" + how
					args := append(r.cmd, "--sandboxes", fmt.Sprint(unnamed), "--name", name, "--delete", fmt.Sprint(deleted))
					if how != "exits" {
						args = append(args, "--hold")
					}
					p := w.start(args...)
					created, gone := p.zeroCodeReady()
					if len(created) != unnamed+1 || len(gone) != deleted {
						t.Fatalf("the runner created %d and deleted %d, want %d and %d; stderr:\n%s", len(created), len(gone), unnamed+1, deleted, p.stderr)
					}
					if n := w.sim.Calls()[daytonatest.RouteDelete]; n != deleted {
						t.Fatalf("Daytona received %d deletes before the runner ended, want the runner's %d", n, deleted)
					}
					// The named sandbox carries the runner's name and label
					// and tether's labels; the others tether's name and labels.
					for id, sbName := range created {
						sb, ok := w.sim.Sandbox(id)
						if !ok {
							t.Fatalf("sandbox %s is not in the simulator", id)
						}
						in := sb.Labels[intent.LabelIntent]
						want := "tether-" + in
						if id == created.named(name) {
							want = name
							if sb.Labels["job"] != name {
								t.Errorf("sandbox %s lost the runner's label job=%s: %v", id, name, sb.Labels)
							}
						}
						now := sb.Name
						if _, ok := gone[id]; ok {
							// Renamed DESTROYED_<name>_<ms> by its delete, as Daytona does.
							now = strings.TrimPrefix(now, "DESTROYED_")
							now = now[:max(strings.LastIndex(now, "_"), 0)]
						}
						if in == "" || sb.Labels[intent.LabelOwner] == "" || now != want || sbName != want {
							t.Errorf("sandbox %s: name %q (the runner was told %q) labels %v; want %q with tether's labels", id, sb.Name, sbName, sb.Labels, want)
						}
					}

					p.end(how)

					// The simulator's record: exactly the runner's sandboxes,
					// each destroyed after exactly one DELETE.
					owner, intents := w.ownerAndIntents()
					all := w.sim.Sandboxes()
					if len(all) != len(created) {
						t.Errorf("the simulator holds %d sandboxes, want the runner's %d", len(all), len(created))
					}
					for _, sb := range all {
						if _, ok := created[sb.ID]; !ok {
							t.Errorf("sandbox %s (%s) was not created by the runner", sb.ID, sb.Name)
						}
						if sb.State != "destroyed" || !sb.DeleteRequested {
							t.Errorf("sandbox %s (%s): %s, delete requested %v; want destroyed", sb.ID, sb.Name, sb.State, sb.DeleteRequested)
						}
						if n := w.sim.CallsFor(sb.ID)[daytonatest.RouteDelete]; n != 1 {
							t.Errorf("sandbox %s (%s) received %d DELETEs, want 1", sb.ID, sb.Name, n)
						}
						if sb.Labels[intent.LabelOwner] != owner {
							t.Errorf("sandbox %s: owner label %q, want the journal's %q", sb.ID, sb.Labels[intent.LabelOwner], owner)
						}
						// A delete renames a sandbox DESTROYED_<name>_<ms>, as Daytona does.
						if sb.ID == created.named(name) && (sb.Labels["job"] != name || !strings.HasPrefix(sb.Name, "DESTROYED_"+name+"_")) {
							t.Errorf("the named sandbox %s ended as %q with labels %v", sb.ID, sb.Name, sb.Labels)
						}
					}
					if n := w.sim.Calls()[daytonatest.RouteDelete]; n != len(created) {
						t.Errorf("Daytona received %d deletes, want %d (%d by the runner, %d by tether's drain)", n, len(created), deleted, len(created)-deleted)
					}
					if len(intents) != len(created) {
						t.Errorf("the journal holds %d intents, want one per create, %d", len(intents), len(created))
					}
					journaledName := false
					for _, in := range intents {
						if in.State != intent.Gone {
							t.Errorf("intent %s (%s) is %s, want gone", in.ID, in.Name, in.State)
						}
						journaledName = journaledName || (in.Name == name && in.SandboxID == created.named(name))
					}
					if !journaledName {
						t.Errorf("no intent journals the runner's name %q with its sandbox id", name)
					}
				})
			}
		})
	}
}

// destroyLag is how long the simulator's destroy action waits after an
// accepted DELETE: within Daytona's own range (under a second to about 10 s),
// and longer than the runner takes from its deletes to its end.
const destroyLag = 2 * time.Second

// sandboxes maps each sandbox id the runner printed to its name.
type sandboxes map[string]string

// named is the id of the sandbox called name, "" if none.
func (s sandboxes) named(name string) string {
	for id, n := range s {
		if n == name {
			return id
		}
	}
	return ""
}

// zeroCodeReady reads the runner's lines until "ready": what it created
// ("created ID NAME") and what it deleted itself ("deleted ID NAME").
func (p *proc) zeroCodeReady() (created, deleted sandboxes) {
	p.t.Helper()
	created, deleted = sandboxes{}, sandboxes{}
	for _, l := range p.untilReady() {
		f := strings.Fields(l)
		switch {
		case len(f) == 3 && f[0] == "created":
			created[f[1]] = f[2]
		case len(f) == 3 && f[0] == "deleted":
			deleted[f[1]] = f[2]
		}
	}
	return created, deleted
}

// end ends a zero-code run as how says: the runner exits on its own
// ("exits"), is SIGKILLed ("killed": a crash, the OOM killer), or tether
// gets SIGTERM ("stopped": docker stop), which it forwards; tether's exit
// code must say which.
func (p *proc) end(how string) {
	p.t.Helper()
	want := 0
	switch how {
	case "killed":
		want = 128 + int(syscall.SIGKILL)
		if err := syscall.Kill(childOf(p.t, p.cmd.Process.Pid), syscall.SIGKILL); err != nil {
			p.t.Fatal(err)
		}
	case "stopped":
		want = 128 + int(syscall.SIGTERM)
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			p.t.Fatal(err)
		}
	}
	if code := p.wait(); code != want {
		p.t.Fatalf("tether exited %d, want %d; stderr:\n%s", code, want, p.stderr)
	}
}

// childOf is the pid of the one child of pid (tether's runner), read from
// /proc (any of tether's threads may have started it).
func childOf(t *testing.T, pid int) int {
	t.Helper()
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if fields := strings.Fields(string(b)); len(fields) > 0 {
			child, err := strconv.Atoi(fields[0])
			if err != nil {
				t.Fatal(err)
			}
			return child
		}
	}
	t.Fatalf("tether (pid %d) has no child in /proc", pid)
	return 0
}

// ownerAndIntents reads the journal's owner and intents once tether has exited.
func (w *world) ownerAndIntents() (string, []intent.Intent) {
	w.t.Helper()
	j, err := journal.Open(w.journal, journal.Options{})
	if err != nil {
		w.t.Fatal(err)
	}
	defer j.Close()
	all, err := j.All()
	if err != nil {
		w.t.Fatal(err)
	}
	return j.Owner(), all
}
