package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/tether-run/tether/internal/demo/samplerunner"
	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
	"github.com/tether-run/tether/supervisor"
)

// DemoCommand is `tether demo`: the whole story on a machine with no
// Daytona account. It serves the simulated Daytona API on loopback, runs a
// sample runner under `tether run` (this same binary, as real processes),
// ends it the way production does — SIGTERM as docker stop sends it, then a
// SIGKILL of tether itself and a restart on the same journal — and checks
// with the simulator that every sandbox ended confirmed gone.
//
// `tether demo runner [flags]` is the sample runner itself (package
// samplerunner); the demo starts it as tether's child.
type DemoCommand struct{}

func (*DemoCommand) Synopsis() string {
	return "show tether draining and replaying sandboxes against a simulated Daytona"
}

// Demo timing. The simulated API answers after demoLatency, sandboxes take
// demoCreateDelay to start and demoDestroyDelay to be destroyed after a
// delete, so deletion is asynchronous as on the real server.
const (
	demoLatency      = 20 * time.Millisecond
	demoCreateDelay  = 200 * time.Millisecond
	demoDestroyDelay = 300 * time.Millisecond
	// demoPhaseTimeout bounds each phase; a phase that takes longer is a failure.
	demoPhaseTimeout = 60 * time.Second
	// dockerStopKill is when docker stop would SIGKILL (its default -t 10).
	dockerStopKill = 10 * time.Second
	demoAPIKey     = "demo-key"
)

func (*DemoCommand) Run(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "runner" {
		if code := samplerunner.Main(ctx, args[1:], os.Stdout, os.Stderr); code != 0 {
			return &ExitError{Code: code}
		}
		return nil
	}
	if len(args) > 0 && args[0] == "daytona" {
		return demoDaytona(ctx, args[1:]) // demo_daytona.go
	}
	if len(args) > 0 && args[0] == "e2b" {
		return demoE2B(ctx, args[1:]) // demo_e2b.go
	}
	fs := newFlags("demo", "Usage: tether demo [flags]\n       tether demo runner [flags]   (the sample runner the demo starts)\n       tether demo daytona [flags]  (the simulated Daytona API alone, to try tether against)\n       tether demo e2b [flags]      (the simulated E2B API alone, likewise)\n\nRuns the whole story against a simulated Daytona on loopback: a sample runner\nunder tether run, stopped as docker stop does, then tether kill -9ed and\nrestarted on the same journal; exits 0 only if every sandbox ended confirmed gone.\n")
	sandboxes := fs.Int("sandboxes", 4, "sandboxes the runner creates in each of the two runs")
	faults := fs.String("faults", "", "simulated faults, e.g. latency=50ms,429=0.1,5xx=0.05,create-lost=0.2,destroying=1s,seed=1")
	verbose := fs.Bool("verbose", false, "show every log line of tether (without it, the story: what each step did, in a sentence)")
	if err := parseFlags(fs, args, 0); err != nil {
		return helped(err)
	}
	if *sandboxes < 2 || *sandboxes > 500 {
		return usageError(fs, fmt.Errorf("--sandboxes %d: must be between 2 and 500", *sandboxes))
	}
	f, err := demoFaults(*faults)
	if err != nil {
		return usageError(fs, fmt.Errorf("--faults: %w", err))
	}

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	d, err := newDemo(f, *verbose)
	if err != nil {
		return err
	}
	defer d.close()
	if *faults != "" {
		d.say("simulated faults: %s", f)
	}
	ok, err := d.run(ctx, *sandboxes)
	if err != nil {
		return err
	}
	if !ok {
		return &ExitError{Code: 1, Err: errors.New("demo: some sandboxes did not end confirmed gone (see the table)")}
	}
	return nil
}

// demoRow is one sandbox in the final table.
type demoRow struct {
	intent, name, sandbox string
	run                   int    // 1: ended by docker stop; 2: ended by kill -9 and restart
	how                   string // created, unobserved, lost
}

type demo struct {
	sim     *daytonatest.Server
	self    string
	dir     string
	verbose bool
	tty     bool
	out     io.Writer

	rows   []demoRow // appended by awaitReady, in run order
	phases []phaseTime

	mu      sync.Mutex
	running *exec.Cmd // the tether process of the current phase; also read by close
}

type phaseTime struct {
	what string
	took time.Duration
}

func newDemo(f daytonatest.Faults, verbose bool) (*demo, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("demo: find my own binary: %w", err)
	}
	// A short path: Unix socket paths are limited to about 100 bytes.
	dir, err := os.MkdirTemp("", "tether-demo-")
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	sim := daytonatest.NewServer(
		daytonatest.WithCreateDelay(demoCreateDelay),
		daytonatest.WithDestroyDelay(demoDestroyDelay),
		daytonatest.WithFaults(f),
	)
	sim.AddKey(demoAPIKey, "demo-org")
	return &demo{sim: sim, self: self, dir: dir, verbose: verbose, tty: isTerminal(os.Stdout), out: os.Stdout}, nil
}

// close leaves nothing behind: the tether of the current phase (and through
// its parent-death signal, its runner), the simulator, the temp directory.
func (d *demo) close() {
	d.mu.Lock()
	cmd := d.running
	d.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	}
	d.sim.Close()
	_ = os.RemoveAll(d.dir)
}

func (d *demo) say(format string, a ...any) {
	fmt.Fprintf(d.out, format+"\n", a...)
}

func (d *demo) step(n int, format string, a ...any) {
	head := fmt.Sprintf("[%d/5] ", n)
	if d.tty {
		head = "\033[1m" + head + "\033[0m"
	}
	fmt.Fprintf(d.out, "\n"+head+format+"\n", a...)
}

func (d *demo) mark(ok bool) string {
	switch {
	case ok && d.tty:
		return "\033[32m✓\033[0m"
	case ok:
		return "ok"
	case d.tty:
		return "\033[31m✗\033[0m"
	default:
		return "FAIL"
	}
}

func (d *demo) journal() string { return filepath.Join(d.dir, "journal.db") }

// run plays the five steps and prints the table; ok is true when every
// sandbox ended confirmed gone.
func (d *demo) run(ctx context.Context, n int) (bool, error) {
	d.say("tether demo: a simulated Daytona API on %s, a journal in %s", d.sim.URL, d.dir)
	d.explain("The journal is tether's file (bbolt) of every sandbox declared to it, written to disk before tether answers: what it holds survives a crash of tether.")

	d.step(1, "tether run starts a sample runner, which declares and creates %d sandboxes with Daytona's auto-stop set to 0 (disabled), as some runners leave it: then no server-side cleanup ever comes", n)
	d.explain("An intent is the runner's word to tether, before each create: \"a sandbox named tether-<id> is about to exist\". tether journals it, so it can find and delete that sandbox even if the create's answer never reaches anyone.")
	start := time.Now()
	t1, err := d.startTether(ctx, "run-1", "--sandboxes", fmt.Sprint(n), "--label", "run-1")
	if err != nil {
		return false, err
	}
	if err := d.awaitReady(ctx, t1, 1); err != nil {
		return false, err
	}
	d.phase("run 1: declare and create", time.Since(start))
	d.live(1, "running")

	d.step(2, "docker stop: SIGTERM to tether (docker would SIGKILL %s later)", dockerStopKill)
	d.explain("A drain is what tether does when its runner ends: for every live intent, prove the sandbox its own (id, name, labels), delete it, and wait until Daytona answers 404, then exit.")
	start = time.Now()
	code, err := t1.stop(ctx, syscall.SIGTERM)
	if err != nil {
		return false, err
	}
	took := time.Since(start)
	d.phase("run 1: SIGTERM → child ended → drained → exit", took)
	d.say("tether exited %d after %s (%s inside docker stop's %s)%s", code, took.Round(time.Millisecond), d.mark(took < dockerStopKill), dockerStopKill, exitMeaning(code))
	d.live(1, "after the drain")

	d.step(3, "a second run creates %d more; the runner dies before reporting the last one's id to tether", n)
	start = time.Now()
	t2, err := d.startTether(ctx, "run-2", "--sandboxes", fmt.Sprint(n), "--unobserved", "1", "--label", "run-2")
	if err != nil {
		return false, err
	}
	if err := d.awaitReady(ctx, t2, 2); err != nil {
		return false, err
	}
	d.phase("run 2: declare and create", time.Since(start))

	d.step(4, "kill -9 tether: no cleanup code runs anywhere (the runner dies with it)")
	if _, err := t2.stop(ctx, syscall.SIGKILL); err != nil {
		return false, err
	}
	d.live(2, "leaked")

	d.step(5, "tether restarts on the same journal and replays what the crash left")
	d.explain("A replay is the drain a restarted tether runs, in the background, on the intents its journal still holds live: the unobserved one is found by its name.")
	start = time.Now()
	t3, err := d.startTether(ctx, "restart", "--sandboxes", "0", "--wait-idle")
	if err != nil {
		return false, err
	}
	if err := d.awaitReady(ctx, t3, 0); err != nil {
		return false, err
	}
	if code, err := t3.wait(ctx); err != nil {
		return false, err
	} else if code != 0 {
		d.say("the restarted tether exited %d", code)
	}
	d.phase("restart: replay until no intent is live", time.Since(start))
	d.live(2, "after the replay")

	return d.table()
}

func (d *demo) phase(what string, took time.Duration) {
	d.phases = append(d.phases, phaseTime{what, took})
}

// live prints what the simulated Daytona says of the sandboxes of one run:
// every sandbox that exists with the run's label, by the simulator's own
// record — the lost creates too, whose id the runner never learned.
func (d *demo) live(run int, when string) {
	tag := fmt.Sprintf("run-%d", run)
	known := map[string]bool{}
	for _, r := range d.rowsOf(run) {
		if r.sandbox != "" {
			known[r.sandbox] = true
		}
	}
	var alive []string
	gone := 0
	for _, sb := range d.sim.Sandboxes() {
		if sb.Labels["run"] != tag {
			continue
		}
		if sb.State == "destroyed" {
			gone++
			continue
		}
		what := fmt.Sprintf("%s (%s, auto-stop %d min)", creationName(sb.Name), sb.State, sb.AutoStopInterval)
		if !known[sb.ID] {
			what += ", a lost create: the runner never learned its id"
		}
		alive = append(alive, what)
	}
	d.say("Daytona, %s: %d sandboxes alive, %d gone", when, len(alive), gone)
	for _, a := range alive {
		d.say("  alive: %s", a)
	}
}

// creationName undoes Daytona's rename of a deleted sandbox
// (DESTROYED_<name>_<unix ms>), to show the name it was created with.
func creationName(name string) string {
	rest, ok := strings.CutPrefix(name, "DESTROYED_")
	if !ok {
		return name
	}
	if i := strings.LastIndex(rest, "_"); i > 0 {
		return rest[:i]
	}
	return rest
}

func (d *demo) rowsOf(run int) []demoRow {
	var out []demoRow
	for _, r := range d.rows {
		if r.run == run {
			out = append(out, r)
		}
	}
	return out
}

// table prints one row per sandbox: whether tether's journal and the
// simulated Daytona agree that it is gone, and by which path it went.
func (d *demo) table() (bool, error) {
	j, err := journal.Open(d.journal(), journal.Options{})
	if err != nil {
		return false, fmt.Errorf("demo: read the journal: %w", err)
	}
	defer j.Close()
	d.say("")
	tw := tabwriter.NewWriter(d.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SANDBOX\tCREATED\tENDED BY\tJOURNAL\tDAYTONA\tCONFIRMED GONE")
	all := true
	for _, r := range d.rows {
		in, err := j.Get(r.intent)
		state := "missing"
		if err == nil {
			state = string(in.State)
		}
		sandbox := r.sandbox
		if sandbox == "" && err == nil {
			sandbox = in.SandboxID
		}
		daytonaState := "never created"
		if sandbox != "" {
			if sb, ok := d.sim.Sandbox(sandbox); ok {
				daytonaState = sb.State
			}
		}
		created := "run 1"
		ended := "drain (SIGTERM)"
		if r.run == 2 {
			created, ended = "run 2", "replay (restart)"
		}
		if r.how != "created" {
			created += ", " + r.how
		}
		ok := state == string(intent.Gone) && daytonaState == "destroyed"
		all = all && ok
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.name, created, ended, state, daytonaState, d.mark(ok))
	}
	tw.Flush()
	d.say("")
	for _, p := range d.phases {
		d.say("%-48s %s", p.what, p.took.Round(time.Millisecond))
	}
	if all {
		d.say("\n%s every sandbox ended confirmed gone: deleted by tether and answered 404 by Daytona.", d.mark(true))
	} else {
		d.say("\n%s some sandboxes are not confirmed gone: tether keeps them in the journal and says so.", d.mark(false))
	}
	d.say("\nTry next:")
	for _, l := range [][2]string{
		{"tether demo --faults 429=0.2,5xx=0.1,create-lost=0.3", "the same story under rate limits, server errors and lost creates"},
		{"tether demo --verbose", "with every log line of tether"},
		{"tether demo daytona", "a local Daytona to run your own runner against (README: Try it locally)"},
		{"tether doctor --live", "check your own Daytona account, with one real sandbox created and deleted"},
		{"tether run -- YOUR-RUNNER", "README.md: the three ways to integrate; zero code is the default"},
	} {
		d.say("  %-54s %s", l[0], l[1])
	}
	return all, nil
}

// exitMeaning explains an exit code above 128: the runner's status, ended
// by a signal, passed on the way a shell reports it.
func exitMeaning(code int) string {
	if code <= 128 || code > 128+64 {
		return ""
	}
	sig := syscall.Signal(code - 128)
	return fmt.Sprintf("\n  %d = 128+%d: its runner ended by %s, passed on as a shell reports it (docker stop expects this)", code, code-128, signalName(sig))
}

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return "signal " + fmt.Sprint(int(s))
}

// explain says in one line what a word of the story means, the first time
// it comes up.
func (d *demo) explain(text string) {
	if d.tty {
		text = "\033[2m" + text + "\033[0m"
	}
	fmt.Fprintln(d.out, "  "+text)
}

// demoTether is one `tether run` of the demo, with its runner's stdout.
type demoTether struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan struct{}
	err   error // of Wait, once done is closed
}

// startTether starts `tether run -- tether demo runner ARGS` on the demo's
// journal, socket and spool, in its own process group so a Ctrl-C on the
// demo's terminal reaches the demo, which then cleans up.
func (d *demo) startTether(ctx context.Context, name string, runnerArgs ...string) (*demoTether, error) {
	args := []string{"run",
		"--journal", d.journal(),
		"--socket", filepath.Join(d.dir, "tether.sock"),
		"--spool", filepath.Join(d.dir, "spool"),
		"--label", "demo=" + name,
		// The sample runner declares every sandbox over the socket and
		// talks to Daytona itself; the demo shows what tether does when it
		// dies between a create and its report, which the zero-code proxy
		// would otherwise close for it.
		"--daytona-proxy=false",
		"--", d.self, "demo", "runner"}
	cmd := exec.Command(d.self, append(args, runnerArgs...)...)
	cmd.Env = append(os.Environ(),
		"DAYTONA_API_URL="+d.sim.URL,
		"DAYTONA_API_KEY="+demoAPIKey,
		"TETHER_LOG_FORMAT=text",
	)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("demo: start tether: %w", err)
	}
	p := &demoTether{cmd: cmd, lines: make(chan string, 1024), done: make(chan struct{})}
	d.mu.Lock()
	d.running = cmd
	d.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer close(p.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			d.logLine(sc.Text())
		}
	}()
	go func() {
		wg.Wait()
		p.err = cmd.Wait()
		d.mu.Lock()
		if d.running == cmd {
			d.running = nil
		}
		d.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// logLine shows one log line of tether: every one with --verbose; else
// only what moves the story on, in a sentence (the signal, the drain's and
// the replay's outcome), and warnings and errors as they are.
func (d *demo) logLine(line string) {
	if !d.verbose {
		if line = storyLine(line); line == "" {
			return
		}
	}
	prefix := "    tether │ "
	if d.tty {
		prefix = "\033[2m" + prefix
		line += "\033[0m"
	}
	fmt.Fprintln(d.out, prefix+line)
}

// logAttr is one key=value of a log line in slog's text format.
var logAttr = regexp.MustCompile(`(\w+)=("(?:[^"\\]|\\.)*"|\S+)`)

// storyLine is what a log line of tether says for the demo's story, or ""
// when it says nothing the demo does not already show.
func storyLine(line string) string {
	if rest, ok := strings.CutPrefix(line, "tether: "); ok {
		// The drain's report: its first line (the counts per state are
		// in the table at the end).
		if strings.HasPrefix(rest, "drain: ") {
			return rest
		}
		return ""
	}
	attrs := map[string]string{}
	for _, m := range logAttr.FindAllStringSubmatch(line, -1) {
		v := m[2]
		if u, err := strconv.Unquote(v); err == nil {
			v = u
		}
		attrs[m[1]] = v
	}
	switch msg := attrs["msg"]; {
	case attrs["level"] == "WARN" || attrs["level"] == "ERROR":
		return line
	case msg == "stopping the child":
		return fmt.Sprintf("%s received: tether passes it to its runner (%s to exit), then drains", attrs["signal"], attrs["grace"])
	case msg == "auto-stop was disabled; enforced":
		return fmt.Sprintf("%s had auto-stop 0: set to %s min, so Daytona stops it even if tether dies", shortID(attrs["sandbox"]), attrs["minutes"])
	case strings.HasPrefix(msg, "replay: resolving"):
		return fmt.Sprintf("the journal holds %s live intents from before the crash: replaying them", attrs["live"])
	case strings.HasPrefix(msg, "replay: cut short"):
		// The runner saw nothing live and exited before the replay's last
		// line: what is left, if anything, is the drain's.
		return fmt.Sprintf("replay: %s resolved before the runner ended; the drain takes over the rest", attrs["resolved"])
	case msg == "replay: done":
		return fmt.Sprintf("replay: done in %s, %s gone, %s unresolved", attrs["elapsed"], attrs["gone"], attrs["unresolved"])
	}
	return ""
}

func shortID(id string) string {
	if len(id) > 8 {
		return "sandbox " + id[:8] + "…"
	}
	return "sandbox " + id
}

// awaitReady reads the runner's lines until it says ready, recording each
// sandbox for the table under run.
func (d *demo) awaitReady(ctx context.Context, p *demoTether, run int) error {
	timeout := time.NewTimer(demoPhaseTimeout)
	defer timeout.Stop()
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				<-p.done
				return fmt.Errorf("demo: tether exited before its runner was ready: %v", p.err)
			}
			l, _ := samplerunner.ParseLine(line)
			if l.How == "ready" {
				return nil
			}
			if l.How == "created" || l.How == "unobserved" || l.How == "lost" {
				r := demoRow{intent: l.Intent, name: l.Name, run: run, how: l.How}
				if l.How != "lost" {
					r.sandbox = l.Sandbox
				}
				d.rows = append(d.rows, r)
				what := "created " + r.sandbox
				switch l.How {
				case "unobserved":
					what = "created " + r.sandbox + ", but tether never hears the id"
				case "lost":
					what = "create failed: " + l.Rest
				}
				d.say("  runner: %s %s", r.name, what)
			}
		case <-ctx.Done():
			return fmt.Errorf("demo: interrupted")
		case <-timeout.C:
			return fmt.Errorf("demo: the runner was not ready within %s", demoPhaseTimeout)
		}
	}
}

// stop sends sig to tether alone (not its group: docker stop signals PID 1)
// and waits for it to exit.
func (p *demoTether) stop(ctx context.Context, sig syscall.Signal) (int, error) {
	if err := p.cmd.Process.Signal(sig); err != nil {
		return 0, fmt.Errorf("demo: signal tether: %w", err)
	}
	return p.wait(ctx)
}

func (p *demoTether) wait(ctx context.Context) (int, error) {
	go func() {
		for range p.lines { // keep the pipe flowing
		}
	}()
	timeout := time.NewTimer(demoPhaseTimeout)
	defer timeout.Stop()
	select {
	case <-p.done:
	case <-ctx.Done():
		return 0, fmt.Errorf("demo: interrupted")
	case <-timeout.C:
		return 0, fmt.Errorf("demo: tether did not exit within %s", demoPhaseTimeout)
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok {
			return supervisor.StatusOf(ws).Code, nil
		}
		return ee.ExitCode(), nil
	}
	if p.err != nil {
		return 0, p.err
	}
	return 0, nil
}

// isTerminal reports whether f is a terminal (not a pipe or file, as in CI).
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
