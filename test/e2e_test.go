// Package e2e_test proves tether's promise end to end: nothing outlives the
// runner. Every test runs the real tether binary and the real sample runner
// (test/runner, package samplerunner) as processes, with real signals, a real bbolt journal and a
// real Unix socket, against the simulated Daytona API of daytonatest, and
// judges by what the simulator says happened to each sandbox, by the journal
// once tether has exited, and by tether's exit code and stderr report.
//
// No test sleeps to synchronise: each waits for a line of the runner, for a
// process to exit, or polls a condition under a generous bound.
package e2e_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/testutil"

	"github.com/oklog/ulid/v2"

	"github.com/tether-run/tether/intentapi"
	"github.com/tether-run/tether/intentapi/client"
	"github.com/tether-run/tether/internal/demo/samplerunner"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// Bounds of every wait: the one set of internal/testutil. They are far
// above what the steps take on an idle machine, so that only a real hang
// fails a test on a loaded one.
const (
	// waitBound bounds a poll of a condition and a runner's "ready".
	waitBound = testutil.WaitBound
	// exitBound bounds the wait for a tether process to exit.
	exitBound = testutil.ExitBound
)

// Drain deadlines given to tether.
var (
	// drainTimeout is given to every tether whose drain must converge; the
	// report then proves it did, before this deadline.
	drainTimeout = testutil.DrainTimeout.String()
	// unresolvedDrain is given to a tether whose drain runs to its deadline
	// (an intent it cannot resolve) and must have finished everything else
	// before it: long enough for that on a loaded machine, where a few
	// seconds were not.
	unresolvedDrain = (10 * time.Second).String()
)

// Simulated timings: short, but long enough that deletion is visibly
// asynchronous (destroying, then 404).
const (
	simCreateDelay  = 10 * time.Millisecond
	simDestroyDelay = 50 * time.Millisecond
)

// otherOrg is a second account in the same simulator.
const otherOrg = "org-other"

var bin struct{ tether, runner string }

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(runHelper(os.Args[1:]))
	}
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		fmt.Println("SKIP: the end-to-end tests of test/ do not run with -short")
		return 0
	}
	// Helpers are this test binary; with -race each would sleep a second
	// before exiting, which slows every test down (not a correctness issue).
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	// Most of these tests wait on timers and other processes (leases,
	// graces, drains), not on this process's CPU.
	testutil.WaitingParallel(8)
	defer testutil.Cleanup()
	for out, pkg := range map[*string]string{
		&bin.tether: testutil.TetherPkg,
		&bin.runner: testutil.Module + "/test/runner",
	} {
		path, err := testutil.BuildBinary(pkg)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		*out = path
	}
	return m.Run()
}

// world is one test's universe: a simulated Daytona account, a journal,
// socket and spool directory, and sandboxes planted in the same simulator
// that are not ours and must never be touched.
type world struct {
	t       *testing.T
	sim     *daytonatest.Server
	dir     string
	journal string
	socket  string
	spool   string
	owner   string // tether-owner of the journal
	env     []string

	// wrap, if set, is a command that execs tether (e.g. prlimit).
	wrap []string

	mu      sync.Mutex
	foreign map[string]daytonatest.Sandbox // planted, by id, as planted
}

// computing is the turn of the tests that compute rather than wait (10,000
// spool files or intents through tether): the package runs many tests at
// once, and two of these together take both cores from each other's
// processes and from the waiting tests' (a runner's mv racing a 3 s grace).
var computing = make(chan struct{}, 1)

// computes makes t wait until no other test that computes runs, and holds
// the turn until t ends. The wait has its own bound: the two others, each
// bounded by its own waits, end well within it.
func computes(t *testing.T) {
	t.Helper()
	bound := time.NewTimer(3 * testutil.ExitBound)
	defer bound.Stop()
	select {
	case computing <- struct{}{}:
	case <-bound.C:
		t.Fatalf("no turn to compute within %s: another computing test holds it", 3*testutil.ExitBound)
	}
	t.Cleanup(func() { <-computing })
}

func newWorld(t *testing.T, opts ...daytonatest.Option) *world {
	t.Helper()
	sim, _ := testutil.Daytona(t, append([]daytonatest.Option{
		daytonatest.WithCreateDelay(simCreateDelay),
		daytonatest.WithDestroyDelay(simDestroyDelay),
	}, opts...)...)
	sim.AddKey("other-key", otherOrg)
	// A short path: Unix socket paths are limited to about 100 bytes.
	dir, err := os.MkdirTemp("", "tt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	w := &world{
		t: t, sim: sim, dir: dir,
		journal: filepath.Join(dir, "journal.db"),
		socket:  filepath.Join(dir, "t.sock"),
		spool:   filepath.Join(dir, "spool"),
		foreign: map[string]daytonatest.Sandbox{},
	}
	// Open the journal once to learn its owner id, as an operator could
	// from a volume, so that foreign sandboxes can be planted with this
	// very owner's label before tether ever starts.
	j, err := journal.Open(w.journal, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w.owner = j.Owner()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "TETHER_") || strings.HasPrefix(kv, "DAYTONA_") {
			continue
		}
		w.env = append(w.env, kv)
	}
	w.env = append(w.env,
		"DAYTONA_API_URL="+sim.URL,
		"DAYTONA_API_KEY="+daytonatest.DefaultKey,
		"TETHER_LOG_FORMAT=text",
		// tether drain takes the spool directory first: this world's,
		// never the machine's default (tether run gets --spool too).
		"TETHER_SPOOL="+w.spool,
		// The sample runner declares over the socket and calls Daytona
		// itself, so these tests see tether without the zero-code proxy
		// (which would learn every id at create time); the proxy has its
		// own end-to-end tests.
		"TETHER_DAYTONA_PROXY=false",
		// Nor the machine's Docker engine: the Docker provider has its
		// own end-to-end tests (test/docker).
		"TETHER_DOCKER=false",
		// Marks every process this world starts (tether, its runner, what
		// the runner starts), so the cleanup can kill what outlived tether.
		worldMark+"="+dir,
	)
	w.plantNeighbours()
	// Whatever a test did, nothing foreign may have been touched.
	t.Cleanup(w.checkForeignUntouched)
	return w
}

func newIntentID() string { return strings.ToLower(ulid.Make().String()) }

// plantNeighbours plants, in our own account, a sandbox of another owner
// and one of another run of this same owner, both named and labelled like
// tether's, with auto-stop off so that even the backstop would show.
func (w *world) plantNeighbours() {
	otherOwner := newIntentID()
	id1, id2 := newIntentID(), newIntentID()
	w.plant(daytonatest.DefaultOrg, "tether-"+id1, map[string]string{
		intent.LabelOwner: otherOwner, intent.LabelIntent: id1, "run": "e2e",
	})
	w.plant(daytonatest.DefaultOrg, "tether-"+id2, map[string]string{
		intent.LabelOwner: w.owner, intent.LabelIntent: id2, "run": "another-run",
	})
}

// plantTwin plants, in another account, a sandbox with exactly the name and
// labels of one of ours: only the account tells them apart.
func (w *world) plantTwin(name string, labels map[string]string) {
	w.plant(otherOrg, name, labels)
}

func (w *world) plant(org, name string, labels map[string]string) daytonatest.Sandbox {
	w.t.Helper()
	off := 0
	sb, err := w.sim.AddSandbox(org, daytonatest.SeedSandbox{Name: name, Labels: labels, AutoStopInterval: &off})
	if err != nil {
		w.t.Fatalf("plant %s in %s: %v", name, org, err)
	}
	w.mu.Lock()
	w.foreign[sb.ID] = sb
	w.mu.Unlock()
	return sb
}

// plantOurs makes the sandbox of intent in appear in our account, as a
// create that landed late would: exact name, the intent's labels.
func (w *world) plantOurs(name string, labels map[string]string) daytonatest.Sandbox {
	w.t.Helper()
	off := 0
	sb, err := w.sim.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Name: name, Labels: labels, AutoStopInterval: &off})
	if err != nil {
		w.t.Fatalf("plant %s: %v", name, err)
	}
	return sb
}

// checkForeignUntouched: every planted foreign sandbox is started, was
// never asked to be deleted, kept its auto-stop and labels; and every
// sandbox that was asked to be deleted is in our account with our owner.
func (w *world) checkForeignUntouched() {
	t := w.t
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, was := range w.foreign {
		sb, ok := w.sim.Sandbox(id)
		switch {
		case !ok:
			t.Errorf("foreign sandbox %s (%s in %s) vanished", id, was.Name, was.Org)
		case sb.DeleteRequested || sb.State != "started" || sb.Name != was.Name:
			t.Errorf("foreign sandbox %s (%s in %s) was touched: state %s, delete requested %v, name now %s", id, was.Name, was.Org, sb.State, sb.DeleteRequested, sb.Name)
		case sb.AutoStopInterval != was.AutoStopInterval:
			t.Errorf("foreign sandbox %s (%s in %s): auto-stop changed from %d to %d", id, was.Name, was.Org, was.AutoStopInterval, sb.AutoStopInterval)
		case !maps.Equal(sb.Labels, was.Labels):
			t.Errorf("foreign sandbox %s (%s in %s): labels changed from %v to %v", id, was.Name, was.Org, was.Labels, sb.Labels)
		}
	}
	for _, sb := range w.sim.Sandboxes() {
		if !sb.DeleteRequested {
			continue
		}
		if sb.Org != daytonatest.DefaultOrg || sb.Labels[intent.LabelOwner] != w.owner {
			t.Errorf("sandbox %s (%s in %s, owner %q) was deleted but is not this tether's", sb.ID, sb.Name, sb.Org, sb.Labels[intent.LabelOwner])
		}
	}
}

// --- tether processes ---

// proc is one tether process (see testutil.Proc): its stdout lines (the
// runner's, passed through), its whole stderr (tether's logs and report),
// its exit.
type proc struct {
	*testutil.Proc
	t      *testing.T
	cmd    *exec.Cmd
	stderr *testutil.Buffer
}

// tetherArgs are the flags every `tether run` and `tether drain` of w gets.
func (w *world) tetherArgs(sub string) []string {
	args := []string{sub, "--journal", w.journal}
	if sub == "run" {
		args = append(args, "--socket", w.socket, "--spool", w.spool, "--label", "e2e=yes")
	}
	return args
}

// run starts `tether run [flags] -- runner [runnerArgs]`.
func (w *world) run(flags []string, runnerArgs ...string) *proc {
	args := append(w.tetherArgs("run"), flags...)
	args = append(args, "--", bin.runner, "--label", "e2e")
	return w.start(append(args, runnerArgs...)...)
}

// start starts the tether binary with args, in its own process group (as
// PID 1 of a container is: signals reach it alone).
func (w *world) start(args ...string) *proc { return w.startBin(bin.tether, nil, args...) }

// startBin starts the tether binary at path with args and w's environment
// plus env. Its exit is known when the process exits, even if a runner
// that outlived it still holds its stdout: every wait on it is bounded, and
// the cleanup kills it and every process of the world still running.
func (w *world) startBin(path string, env []string, args ...string) *proc {
	t := w.t
	t.Helper()
	cmd := exec.Command(path, args...)
	if len(w.wrap) > 0 {
		cmd = exec.Command(w.wrap[0], append(append(w.wrap[1:len(w.wrap):len(w.wrap)], path), args...)...)
	}
	cmd.Env = append(append([]string(nil), w.env...), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Registered before the process helper's own cleanup, so it runs after
	// tether is dead.
	t.Cleanup(func() {
		if n := killMarked(w.dir); n > 0 {
			t.Logf("killed %d processes of this test still running after tether", n)
		}
	})
	p := testutil.Start(t, cmd)
	return &proc{Proc: p, t: t, cmd: cmd, stderr: p.Stderr}
}

// worldMark is the environment variable that marks a world's processes.
const worldMark = "E2E_WORLD"

// killMarked SIGKILLs every process whose environment carries the mark of
// the world in dir (a runner that outlived its tether), and says how many.
func killMarked(dir string) int {
	mark := []byte(worldMark + "=" + dir + "\x00")
	entries, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !bytes.Contains(env, mark) {
			continue
		}
		if gone, _ := dead(pid); gone {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			n++
		}
	}
	return n
}

// runnerLine is one sandbox the runner told about.
type runnerLine struct{ how, intent, name, sandbox string }

// runnerOut is what the runner said before "ready".
type runnerOut struct {
	pid   int
	lines []runnerLine
}

func (o runnerOut) of(how ...string) []runnerLine {
	var out []runnerLine
	for _, l := range o.lines {
		for _, h := range how {
			if l.how == h {
				out = append(out, l)
			}
		}
	}
	return out
}

// ready reads the runner's lines until "ready".
func (p *proc) ready() runnerOut {
	p.t.Helper()
	var out runnerOut
	if !p.ReadUntil("runner's ready", out.add) {
		p.Wait()
		p.t.Fatalf("tether exited (%v) before the runner was ready; stderr:\n%s", p.Err(), p.stderr)
	}
	return out
}

// add records one line of the runner's; it reports whether it is "ready".
func (o *runnerOut) add(line string) (ready bool) {
	l, ok := samplerunner.ParseLine(line)
	switch {
	case !ok:
	case l.How == "ready":
		return true
	case l.How == "pid":
		o.pid = l.PID
	default:
		o.lines = append(o.lines, runnerLine{how: l.How, intent: l.Intent, name: l.Name, sandbox: l.Sandbox})
	}
	return false
}

// line is the next line of the runner's output, failing the test if there
// is none within waitBound.
func (p *proc) line() string {
	p.t.Helper()
	l, ok := p.NextLine()
	if !ok {
		p.Wait()
		p.t.Fatalf("tether's output ended (%v); stderr:\n%s", p.Err(), p.stderr)
	}
	return l
}

// wait waits for tether to exit and returns its exit code, 128+N when
// signal N killed it.
func (p *proc) wait() int {
	p.t.Helper()
	return p.Wait()
}

// signal sends sig to tether alone, as docker stop does to PID 1.
func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	p.Signal(sig)
}

// stop signals tether and returns its exit code.
func (p *proc) stop(sig syscall.Signal) int {
	p.t.Helper()
	return p.Stop(sig)
}

// intentOf asks the running tether for one intent.
func (w *world) intentOf(id string) intentapi.Intent {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	in, err := w.client().Get(ctx, id)
	if err != nil {
		w.t.Fatalf("get intent %s: %v", id, err)
	}
	return in
}

// client speaks to the running tether's socket.
func (w *world) client() *client.Client { return client.New(w.socket) }

// runTether runs the tether binary to its end (e.g. `tether drain`) and
// returns its exit code and stderr.
func (w *world) runTether(args ...string) (int, string) {
	w.t.Helper()
	p := w.start(args...)
	return p.wait(), p.stderr.String()
}

// --- the report ---

// report is tether's drain report, read back from its stderr.
type report struct {
	total, left int
	elapsed     time.Duration
	counts      map[string]int        // summary line per state
	unresolved  map[string]reportItem // by intent id
	foreign     map[string]reportItem // by intent id
}

type reportItem struct{ name, sandbox, state, why string }

var (
	reportHead       = regexp.MustCompile(`^tether: drain: (\d+) intents? in (\S+), (\d+) left live$`)
	reportCount      = regexp.MustCompile(`^tether:   (\S+)\s+(\d+)$`)
	reportUnresolved = regexp.MustCompile(`^tether:   unresolved (\S+) intent=(\S+) sandbox=(\S+) state=(\S+): (.*)$`)
	reportForeign    = regexp.MustCompile(`^tether:   foreign (\S+) intent=(\S+) sandbox=(\S+): (.*)$`)
)

// parseReport reads the last drain report of stderr; ok is false if there
// is none (a drain with nothing live prints none).
func parseReport(stderr string) (rep report, ok bool) {
	for _, line := range strings.Split(stderr, "\n") {
		if m := reportHead.FindStringSubmatch(line); m != nil {
			rep = report{counts: map[string]int{}, unresolved: map[string]reportItem{}, foreign: map[string]reportItem{}}
			rep.total, _ = strconv.Atoi(m[1])
			rep.elapsed, _ = time.ParseDuration(m[2])
			rep.left, _ = strconv.Atoi(m[3])
			ok = true
			continue
		}
		if !ok {
			continue
		}
		if m := reportUnresolved.FindStringSubmatch(line); m != nil {
			rep.unresolved[m[2]] = reportItem{name: m[1], sandbox: m[3], state: m[4], why: m[5]}
		} else if m := reportForeign.FindStringSubmatch(line); m != nil {
			rep.foreign[m[2]] = reportItem{name: m[1], sandbox: m[3], why: m[4]}
		} else if m := reportCount.FindStringSubmatch(line); m != nil {
			rep.counts[m[1]], _ = strconv.Atoi(m[2])
		}
	}
	return rep, ok
}

func mustReport(t *testing.T, stderr string) report {
	t.Helper()
	rep, ok := parseReport(stderr)
	if !ok {
		t.Fatalf("no drain report on tether's stderr:\n%s", stderr)
	}
	return rep
}

// --- the simulator's truth and the journal's ---

// assertDestroyed: each sandbox id is known to the simulator, was asked to
// be deleted, and is destroyed (it answers 404).
func (w *world) assertDestroyed(ids ...string) {
	w.t.Helper()
	for _, id := range ids {
		sb, ok := w.sim.Sandbox(id)
		switch {
		case !ok:
			w.t.Errorf("sandbox %s: unknown to the simulator", id)
		case sb.State != "destroyed" || !sb.DeleteRequested:
			w.t.Errorf("sandbox %s (%s): state %s, delete requested %v; want destroyed", id, sb.Name, sb.State, sb.DeleteRequested)
		}
	}
}

// eventuallyDestroyed waits for deletions someone else (the runner) asked
// for to complete, then asserts them as assertDestroyed does.
func (w *world) eventuallyDestroyed(ids ...string) {
	w.t.Helper()
	testutil.Eventually(w.t, "the deletions complete", func() (bool, string) {
		for _, id := range ids {
			if sb, _ := w.sim.Sandbox(id); sb.State != "destroyed" {
				return false, fmt.Sprintf("sandbox %s is %s", id, sb.State)
			}
		}
		return true, ""
	})
	w.assertDestroyed(ids...)
}

// ours returns every sandbox of our account that carries our owner label.
func (w *world) ours() []daytonatest.Sandbox {
	var out []daytonatest.Sandbox
	for _, sb := range w.sim.Sandboxes() {
		if sb.Org == daytonatest.DefaultOrg && sb.Labels[intent.LabelOwner] == w.owner && sb.Labels["run"] != "another-run" {
			out = append(out, sb)
		}
	}
	return out
}

// byIntent finds our sandbox (destroyed or not) created for intent id.
func (w *world) byIntent(id string) (daytonatest.Sandbox, bool) {
	for _, sb := range w.ours() {
		if sb.Labels[intent.LabelIntent] == id {
			return sb, true
		}
	}
	return daytonatest.Sandbox{}, false
}

// intents reads the journal (tether must have exited), by id.
func (w *world) intents() map[string]intent.Intent {
	w.t.Helper()
	j, err := journal.Open(w.journal, journal.Options{})
	if err != nil {
		w.t.Fatalf("open the journal: %v", err)
	}
	defer j.Close()
	all, err := j.All()
	if err != nil {
		w.t.Fatalf("read the journal: %v", err)
	}
	out := make(map[string]intent.Intent, len(all))
	for _, in := range all {
		out[in.ID] = in
	}
	return out
}

// assertJournal: each intent id is in the journal in state want.
func (w *world) assertJournal(want intent.State, ids ...string) {
	w.t.Helper()
	all := w.intents()
	for _, id := range ids {
		in, ok := all[id]
		if !ok {
			w.t.Errorf("intent %s: not in the journal", id)
			continue
		}
		if in.State != want {
			w.t.Errorf("intent %s (%s): journal state %s, want %s (last error: %s)", id, in.Name, in.State, want, in.LastError)
		}
	}
}

// liveIntents lists the live intents of the running tether.
func (w *world) liveIntents() ([]intentapi.Intent, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return w.client().List(ctx)
}

func ids(lines []runnerLine, field func(runnerLine) string) []string {
	out := make([]string, 0, len(lines))
	for _, l := range lines {
		out = append(out, field(l))
	}
	return out
}

func intentOf(l runnerLine) string  { return l.intent }
func sandboxOf(l runnerLine) string { return l.sandbox }
