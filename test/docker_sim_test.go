package e2e_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/provider/docker"
	"github.com/tether-run/tether/provider/docker/dockertest"
)

// A world with a simulated Docker engine (dockertest) beside its Daytona:
// the crash matrix's Docker cases run in it, so they need no engine on
// the machine (test/docker runs the Docker provider on the real one).
type dockerWorld struct {
	*world
	engine     *dockertest.Server
	neighbours []string
}

func newDockerWorld(t *testing.T) *dockerWorld { return withDocker(t, newWorld(t)) }

// withDocker adds a simulated engine to world (a soak's world of every
// cloud).
func withDocker(t *testing.T, world *world) *dockerWorld {
	t.Helper()
	w := &dockerWorld{world: world, engine: dockertest.New(dockertest.Docker)}
	// A short path: Unix socket paths are limited to about 100 bytes.
	dir, err := os.MkdirTemp("", "te")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	host, err := w.engine.Listen(filepath.Join(dir, "engine.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.engine.Close)
	w.env = append(w.env, docker.EnvHost+"="+host, "TETHER_DOCKER=true")
	// Neighbours in the same engine: another owner's container, and one
	// of this owner with an intent this journal never had, each named
	// and labelled as tether names and labels its own.
	for _, labels := range []map[string]string{
		{intent.LabelOwner: "someone-else", intent.LabelIntent: newIntentID(), docker.LabelName: "tether-x"},
		{intent.LabelOwner: w.owner, intent.LabelIntent: newIntentID(), docker.LabelName: "tether-y"},
	} {
		w.neighbours = append(w.neighbours, w.engine.Add(labels[docker.LabelName], labels))
	}
	return w
}

// dockerRecord is dockertest's record of w, as the crash invariants read
// it: a container is ended when a DELETE removed it.
type dockerRecord struct{ w *dockerWorld }

func (r dockerRecord) view(c dockertest.Container) recSandbox {
	name := c.Labels[docker.LabelName]
	if name == "" {
		name = c.Name
	}
	return recSandbox{id: c.ID, name: name, intent: c.Labels[intent.LabelIntent], state: c.Status, ended: c.Removed && c.Deletes > 0}
}

func (r dockerRecord) ours() []recSandbox {
	var out []recSandbox
	for _, c := range r.w.engine.History() {
		if (c.Labels[intent.LabelOwner] == r.w.owner || runnerMade(c.Labels)) && !slices.Contains(r.w.neighbours, c.ID) {
			out = append(out, r.view(c))
		}
	}
	return out
}

func (r dockerRecord) sandbox(id string) (recSandbox, bool) {
	c, ok := r.w.engine.Container(id)
	return r.view(c), ok
}

// checkForeign: the neighbours run, never sent a delete; every container
// sent one is of our owner or the runner's.
func (r dockerRecord) checkForeign() {
	t := r.w.t
	for _, c := range r.w.engine.History() {
		neighbour := slices.Contains(r.w.neighbours, c.ID)
		switch {
		case neighbour && (c.Removed || c.Deletes > 0 || c.Status != "running"):
			t.Errorf("neighbour %s (labels %v) was touched: %s, %d deletes", c.ID, c.Labels, c.Status, c.Deletes)
		case !neighbour && c.Deletes > 0 && c.Labels[intent.LabelOwner] != r.w.owner && !runnerMade(c.Labels):
			t.Errorf("container %s (labels %v) was sent %d deletes but is not this tether's", c.ID, c.Labels, c.Deletes)
		}
	}
}

// TestDockerAndACloudInOneRun: one `tether run` guards a runner that uses
// Daytona (declared over the socket) and Docker (through the proxy) at
// once; one drain, one report, each sandbox deleted in its own cloud by
// that cloud's record, the neighbours untouched.
func TestDockerAndACloudInOneRun(t *testing.T) {
	t.Parallel()
	w := newDockerWorld(t)
	runner := testutil.Build(t, testutil.Module+"/test/crashrunner")
	args := append(w.tetherArgs("run"), "--drain-timeout", drainTimeout, "--", "sh", "-c",
		`"$0" daytona socket create create exit && "$0" docker proxy create create create delete exit && echo both-done && exec sleep 1000`, runner)
	p := w.start(args...)
	var daytonaIDs, dockerIDs []string
	for {
		line, ok := p.NextLine()
		if !ok {
			t.Fatalf("the runners ended before both were done: %v", p.stderr)
		}
		if line == "both-done" {
			break
		}
		f := strings.Fields(line)
		if len(f) < 4 || f[0] != "created" {
			continue
		}
		if _, ok := w.engine.Container(f[3]); ok {
			dockerIDs = append(dockerIDs, f[3])
		} else {
			daytonaIDs = append(daytonaIDs, f[3])
		}
	}
	if len(daytonaIDs) != 2 || len(dockerIDs) != 3 {
		t.Fatalf("created %v in Daytona and %v in Docker, want 2 and 3", daytonaIDs, dockerIDs)
	}
	p.signal(syscall.SIGTERM)
	p.wait()
	stderr := p.stderr.String()
	// 5: the container the runner deleted itself through the proxy is
	// live (releasing) until the drain confirms it gone.
	if rep, ok := parseReport(stderr); !ok || rep.total != 5 || rep.left != 0 || rep.counts["gone"] != 5 {
		t.Errorf("want one drain of both clouds' 5 live intents, all gone:\n%s", stderr)
	}
	w.assertDestroyed(daytonaIDs...)
	for _, id := range dockerIDs {
		if c, _ := w.engine.Container(id); !c.Removed || c.Deletes != 1 {
			t.Errorf("container %s: removed %v, %d deletes; want removed by one DELETE (the runner's or the drain's)", id, c.Removed, c.Deletes)
		}
	}
	dockerRecord{w}.checkForeign()
}
