// Package examples_test runs each example runner (Go, Node, Python, shell)
// under the real tether binary against the simulated Daytona API on
// loopback, and judges by the simulator's record: a runner that finishes
// its job leaves nothing to tether; one stopped mid-job (SIGTERM to tether,
// as docker stop sends) has every sandbox deleted by tether's drain. The
// zero-code runners (zerocode_test.go) go through tether's Daytona API proxy.
package examples_test

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/testutil"

	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// waitBound bounds every wait for one event.
const waitBound = testutil.WaitBound

var tetherDir string // holds the tether binary; first on the runners' PATH

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("SKIP: the examples' end-to-end tests do not run with -short")
		os.Exit(0)
	}
	// The examples' tests wait on runners, tether and simulated delays.
	testutil.WaitingParallel(4)
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	defer testutil.Cleanup()
	bin, err := testutil.BuildBinary(testutil.TetherPkg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The runners call `tether` by that name, from PATH.
	dir, err := os.MkdirTemp("", "tether-examples-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := os.Symlink(bin, filepath.Join(dir, "tether")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	tetherDir = dir
	return m.Run()
}

// runners are the examples, as the command that starts each.
var runners = []struct {
	name string
	tool string // must be on PATH, else the case is skipped
	cmd  []string
	// build, if set, is the example's package: its binary, built once, is
	// the command.
	build string
}{
	{name: "go", tool: "go", build: testutil.Module + "/examples/go"},
	{"node", "node", []string{"node", "node/runner.js"}, ""},
	{"python", "python3", []string{"python3", "python/runner.py"}, ""},
	{"shell", "curl", []string{"sh", "shell/runner.sh"}, ""},
}

func TestExamples(t *testing.T) {
	t.Parallel()
	const sandboxes = 3
	for _, r := range runners {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			if _, err := exec.LookPath(r.tool); err != nil {
				t.Skipf("SKIP: %s is not installed: the %s example did not run", r.tool, r.name)
			}
			if r.build != "" {
				r.cmd = []string{testutil.Build(t, r.build)}
			}
			t.Run("job done: the runner cleans up", func(t *testing.T) {
				t.Parallel()
				w := newWorld(t)
				p := w.start(append(r.cmd, "--sandboxes", fmt.Sprint(sandboxes), "--label", "done")...)
				if code := p.wait(); code != 0 {
					t.Fatalf("exit %d, want 0; stderr:\n%s", code, p.stderr)
				}
				// The runner's own deletes complete asynchronously (destroying, then 404).
				w.eventuallyDestroyed("done")
				w.assertDestroyed("done", sandboxes)
				for _, in := range w.intents() {
					if in.State != intent.Released {
						t.Errorf("intent %s is %s, want released (the runner did its own cleanup)", in.ID, in.State)
					}
				}
				if strings.Contains(p.stderr.String(), "drain:") {
					t.Errorf("tether drained although the runner released everything:\n%s", p.stderr)
				}
			})
			t.Run("stopped mid-job: tether cleans up", func(t *testing.T) {
				t.Parallel()
				w := newWorld(t)
				p := w.start(append(r.cmd, "--sandboxes", fmt.Sprint(sandboxes), "--label", "killed", "--hold")...)
				if got := p.ready(); got != sandboxes {
					t.Fatalf("the runner reported %d sandboxes, want %d", got, sandboxes)
				}
				if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				if code := p.wait(); code != 128+int(syscall.SIGTERM) {
					t.Errorf("exit %d, want %d (the runner died of the forwarded SIGTERM); stderr:\n%s", code, 128+int(syscall.SIGTERM), p.stderr)
				}
				w.assertDestroyed("killed", sandboxes)
				for _, in := range w.intents() {
					if in.State != intent.Gone {
						t.Errorf("intent %s is %s, want gone", in.ID, in.State)
					}
				}
			})
		})
	}
}

type world struct {
	t       *testing.T
	sim     *daytonatest.Server
	dir     string
	journal string
	env     []string // added to every tether's environment
	flags   []string // added to tether run's flags (after the defaults: they win)
}

func newWorld(t *testing.T, opts ...daytonatest.Option) *world {
	sim, _ := testutil.Daytona(t, append([]daytonatest.Option{daytonatest.WithCreateDelay(10 * time.Millisecond), daytonatest.WithDestroyDelay(50 * time.Millisecond)}, opts...)...)
	// A short path: Unix socket paths are limited to about 100 bytes.
	dir, err := os.MkdirTemp("", "tx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return &world{t: t, sim: sim, dir: dir, journal: filepath.Join(dir, "journal.db")}
}

// assertDestroyed: exactly want sandboxes carry run=label in the
// simulator, and each was deleted and answers 404.
func (w *world) assertDestroyed(label string, want int) {
	w.t.Helper()
	var n int
	for _, sb := range w.sim.Sandboxes() {
		if sb.Labels["run"] != label {
			continue
		}
		n++
		if sb.State != "destroyed" || !sb.DeleteRequested {
			w.t.Errorf("sandbox %s (%s): %s, delete requested %v; want destroyed", sb.ID, sb.Name, sb.State, sb.DeleteRequested)
		}
		// A delete renames the sandbox DESTROYED_<name>_<ms>, as Daytona does.
		if sb.Labels[intent.LabelIntent] == "" || !strings.Contains(sb.Name, "tether-"+sb.Labels[intent.LabelIntent]) {
			w.t.Errorf("sandbox %s was not created with tether's name and labels: %s %v", sb.ID, sb.Name, sb.Labels)
		}
	}
	if n != want {
		w.t.Errorf("%d sandboxes of run %s in the simulator, want %d", n, label, want)
	}
}

// eventuallyDestroyed waits until no sandbox of run=label is destroying.
func (w *world) eventuallyDestroyed(label string) {
	w.t.Helper()
	// Not a failure when it does not happen: the caller's checks say what is left.
	testutil.Poll(func() bool {
		for _, sb := range w.sim.Sandboxes() {
			if sb.Labels["run"] == label && sb.State == "destroying" {
				return false
			}
		}
		return true
	})
}

// intents reads the journal once tether has exited.
func (w *world) intents() []intent.Intent {
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
	return all
}

// proc is one `tether run` of an example runner.
type proc struct {
	*testutil.Proc
	t      *testing.T
	cmd    *exec.Cmd
	stderr *testutil.Buffer
}

// start runs `tether run -- runner...` in this directory.
func (w *world) start(runner ...string) *proc {
	t := w.t
	t.Helper()
	args := []string{"run", "--journal", w.journal, "--socket", filepath.Join(w.dir, "t.sock"), "--spool", filepath.Join(w.dir, "spool"),
		"--drain-timeout", testutil.DrainTimeout.String()}
	args = append(append(args, w.flags...), "--")
	cmd := exec.Command(filepath.Join(tetherDir, "tether"), append(args, runner...)...)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TETHER_") && !strings.HasPrefix(kv, "DAYTONA_") && !strings.HasPrefix(kv, "E2B_") && !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(append(env, "PATH="+tetherDir+":"+os.Getenv("PATH")), testutil.DaytonaEnv(w.sim)...)
	cmd.Env = append(cmd.Env, w.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := testutil.Start(t, cmd)
	return &proc{Proc: p, t: t, cmd: cmd, stderr: p.Stderr}
}

// untilReady returns the runner's lines up to "ready".
func (p *proc) untilReady() []string {
	p.t.Helper()
	var out []string
	ready := p.ReadUntil("runner's ready", func(l string) bool {
		if l == "ready" {
			return true
		}
		out = append(out, l)
		return false
	})
	if !ready {
		p.Wait()
		p.t.Fatalf("tether exited before the runner was ready (%v); stderr:\n%s", p.Err(), p.stderr)
	}
	return out
}

// ready reads lines until "ready" and returns how many sandboxes were created.
func (p *proc) ready() int {
	p.t.Helper()
	n := 0
	for _, l := range p.untilReady() {
		if strings.HasPrefix(l, "created ") {
			n++
		}
	}
	return n
}

// wait returns tether's exit code.
func (p *proc) wait() int {
	p.t.Helper()
	return p.Wait()
}
