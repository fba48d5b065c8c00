// Package examples_test runs each example runner (node, python, shell)
// under the real tether binary against the simulated Daytona API on
// loopback, and judges by the simulator's record: a runner that finishes
// its job leaves nothing to tether; one stopped mid-job (SIGTERM to tether,
// as docker stop sends) has every sandbox deleted by tether's drain. The
// zero-code runners (zerocode_test.go) go through tether's Daytona API proxy.
package examples_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-run/tether/internal/testutil"

	"github.com/tether-run/tether/provider/daytona/daytonatest"
	"github.com/tether-run/tether/spool"
)

// waitBound bounds every wait; far above what a step takes when idle.
const waitBound = 60 * time.Second

var tetherDir string // holds the tether binary; first on the runners' PATH

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tether-examples-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "tether"), "github.com/tether-run/tether/cmd/tether")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build tether:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	tetherDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// runners are the examples, as the command that starts each.
var runners = []struct {
	name string
	tool string // must be on PATH, else the case is skipped
	cmd  []string
}{
	{"node", "node", []string{"node", "node/runner.js"}},
	{"python", "python3", []string{"python3", "python/runner.py"}},
	{"shell", "curl", []string{"sh", "shell/runner.sh"}},
}

func TestExamples(t *testing.T) {
	const sandboxes = 3
	for _, r := range runners {
		t.Run(r.name, func(t *testing.T) {
			if _, err := exec.LookPath(r.tool); err != nil {
				t.Skipf("SKIP: %s is not installed: the %s example did not run", r.tool, r.name)
			}
			t.Run("job done: the runner cleans up", func(t *testing.T) {
				w := newWorld(t)
				p := w.start(append(r.cmd, "--sandboxes", fmt.Sprint(sandboxes), "--label", "done")...)
				if code := p.wait(); code != 0 {
					t.Fatalf("exit %d, want 0; stderr:\n%s", code, p.stderr)
				}
				// The runner's own deletes complete asynchronously (destroying, then 404).
				w.eventuallyDestroyed("done")
				w.assertDestroyed("done", sandboxes)
				for _, in := range w.intents() {
					if in.State != spool.Released {
						t.Errorf("intent %s is %s, want released (the runner did its own cleanup)", in.ID, in.State)
					}
				}
				if strings.Contains(p.stderr.String(), "drain:") {
					t.Errorf("tether drained although the runner released everything:\n%s", p.stderr)
				}
			})
			t.Run("stopped mid-job: tether cleans up", func(t *testing.T) {
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
					if in.State != spool.Gone {
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
}

func newWorld(t *testing.T, opts ...daytonatest.Option) *world {
	sim := daytonatest.NewServer(append([]daytonatest.Option{daytonatest.WithCreateDelay(10 * time.Millisecond), daytonatest.WithDestroyDelay(50 * time.Millisecond)}, opts...)...)
	t.Cleanup(sim.Close)
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
		if sb.Labels[spool.LabelIntent] == "" || !strings.Contains(sb.Name, "tether-"+sb.Labels[spool.LabelIntent]) {
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
	deadline := time.Now().Add(waitBound)
	for {
		busy := 0
		for _, sb := range w.sim.Sandboxes() {
			if sb.Labels["run"] == label && sb.State == "destroying" {
				busy++
			}
		}
		if busy == 0 || time.Now().After(deadline) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// intents reads the journal once tether has exited.
func (w *world) intents() []spool.Intent {
	w.t.Helper()
	j, err := spool.Open(w.journal, spool.Options{})
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

type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	lines  chan string
	stderr *testutil.Buffer
	done   chan struct{}
	err    error
}

// start runs `tether run -- runner...` in this directory.
func (w *world) start(runner ...string) *proc {
	t := w.t
	t.Helper()
	args := []string{"run", "--journal", w.journal, "--socket", filepath.Join(w.dir, "t.sock"), "--spool", filepath.Join(w.dir, "spool"), "--drain-timeout", "30s", "--"}
	cmd := exec.Command(filepath.Join(tetherDir, "tether"), append(args, runner...)...)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TETHER_") && !strings.HasPrefix(kv, "DAYTONA_") && !strings.HasPrefix(kv, "E2B_") && !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "PATH="+tetherDir+":"+os.Getenv("PATH"), "DAYTONA_API_URL="+w.sim.URL, "DAYTONA_API_KEY="+daytonatest.DefaultKey)
	cmd.Env = append(cmd.Env, w.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, cmd: cmd, lines: make(chan string, 1024), stderr: &testutil.Buffer{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	})
	return p
}

// ready reads lines until "ready" and returns how many sandboxes were created.
func (p *proc) ready() int {
	p.t.Helper()
	n := 0
	timeout := time.After(waitBound)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				<-p.done
				p.t.Fatalf("tether exited before ready (%v); stderr:\n%s", p.err, p.stderr)
			}
			if l == "ready" {
				return n
			}
			if strings.HasPrefix(l, "created ") {
				n++
			}
		case <-timeout:
			p.t.Fatalf("not ready within %s; stderr:\n%s", waitBound, p.stderr)
		}
	}
}

// wait returns tether's exit code.
func (p *proc) wait() int {
	p.t.Helper()
	go func() {
		for range p.lines {
		}
	}()
	select {
	case <-p.done:
	case <-time.After(waitBound):
		p.t.Fatalf("tether did not exit within %s; stderr:\n%s", waitBound, p.stderr)
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		p.t.Fatal(p.err)
	}
	return 0
}
