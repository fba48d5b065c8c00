package demo

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/demo/samplerunner"
	"github.com/tether-run/tether/internal/providers"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/supervisor"
)

// Story timing.
const (
	// phaseTimeout bounds each phase; a phase that takes longer is a failure.
	phaseTimeout = 60 * time.Second
	// backstopWait bounds the wait, after the runner is ready, for tether's
	// backstop on every sandbox it reported (a set auto-stop, by the
	// stand-in's record): it runs in the background after each observe, so
	// the runner's "ready" can come first. A backstop that has not landed
	// by then is shown as such.
	backstopWait = 10 * time.Second
	// backstopPoll is the pause between two reads of the record meanwhile.
	backstopPoll = 50 * time.Millisecond
	// dockerStopKill is when docker stop would SIGKILL (its default -t 10).
	dockerStopKill = 10 * time.Second
)

// StoryOptions say how the story is told.
type StoryOptions struct {
	// Tether is the tether binary the story runs (tether demo's own).
	Tether string
	// Kind is the provider whose stand-in it is told against (Demo.Story).
	Kind providers.Kind
	// Sandboxes is how many the runner creates in each of the two runs.
	Sandboxes int
	// Faults are the stand-in's simulated faults (its own --faults keys).
	Faults string
	// Verbose shows every log line of tether instead of the story's.
	Verbose bool
	// Out is where the story is told; TTY: it is a terminal (colours).
	Out io.Writer
	TTY bool
}

// Story is one telling of `tether demo`.
type Story struct {
	o   StoryOptions
	st  *providers.Stand
	srv *Served
	dir string

	rows   []row // appended by awaitReady, in run order
	phases []phaseTime

	mu      sync.Mutex
	running *exec.Cmd // the tether process of the current phase; also read by Close
}

// NewStory starts the stand-in the story is told against, on a loopback
// port, and makes its directory. A bad Faults is a *UsageError.
func NewStory(o StoryOptions) (*Story, error) {
	if o.Kind.Demo == nil || o.Kind.Demo.Story == nil {
		return nil, fmt.Errorf("demo: %s has no story", o.Kind.Name)
	}
	st, err := o.Kind.Demo.Story(o.Faults)
	if err != nil {
		return nil, &UsageError{Err: fmt.Errorf("--faults: %w", err)}
	}
	d := &Story{o: o, st: st}
	if st.Handler != nil {
		if d.srv, err = Serve("127.0.0.1:0", st); err != nil {
			st.Close()
			return nil, fmt.Errorf("demo: %w", err)
		}
	}
	// A short path: Unix socket paths are limited to about 100 bytes.
	if d.dir, err = os.MkdirTemp("", "tether-demo-"); err != nil {
		d.closeStand()
		return nil, fmt.Errorf("demo: %w", err)
	}
	return d, nil
}

func (d *Story) closeStand() {
	if d.srv != nil {
		d.srv.Close()
	} else {
		d.st.Close()
	}
}

// base is where the stand-in is served ("" for a real one).
func (d *Story) base() string {
	if d.srv == nil {
		return ""
	}
	return d.srv.Base
}

// Close leaves nothing behind: the tether of the current phase (and
// through its parent-death signal, its runner), the stand-in, the
// directory.
func (d *Story) Close() {
	d.mu.Lock()
	cmd := d.running
	d.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	}
	d.closeStand()
	_ = os.RemoveAll(d.dir)
}

// row is one sandbox in the final table.
type row struct {
	intent, name, sandbox string
	run                   int    // 1: ended by docker stop; 2: ended by kill -9 and restart
	how                   string // created, unobserved, lost
}

type phaseTime struct {
	what string
	took time.Duration
}

func (d *Story) say(format string, a ...any) {
	fmt.Fprintf(d.o.Out, format+"\n", a...)
}

func (d *Story) step(n int, format string, a ...any) {
	head := fmt.Sprintf("[%d/5] ", n)
	if d.o.TTY {
		head = "\033[1m" + head + "\033[0m"
	}
	fmt.Fprintf(d.o.Out, "\n"+head+format+"\n", a...)
}

func (d *Story) mark(ok bool) string {
	switch {
	case ok && d.o.TTY:
		return "\033[32m✓\033[0m"
	case ok:
		return "ok"
	case d.o.TTY:
		return "\033[31m✗\033[0m"
	default:
		return "FAIL"
	}
}

func (d *Story) journal() string { return filepath.Join(d.dir, "journal.db") }

// title names the provider in the story's sentences.
func (d *Story) title() string { return d.o.Kind.Demo.Title }

// Tell plays the five steps and prints the table; ok is true when every
// sandbox ended confirmed gone.
func (d *Story) Tell(ctx context.Context) (ok bool, err error) {
	n := d.o.Sandboxes
	for _, note := range d.st.Notes {
		d.say("%s", note)
	}
	if d.srv != nil {
		d.say("tether demo: a simulated %s API on %s, a journal in %s", d.title(), d.st.URL(d.base()), d.dir)
	} else {
		d.say("tether demo: %s at %s, a journal in %s", d.title(), d.st.URL(""), d.dir)
	}
	d.explain("The journal is tether's file (bbolt) of every sandbox declared to it, written to disk before tether answers: what it holds survives a crash of tether.")

	d.step(1, "tether run starts a sample runner, which declares and creates %d sandboxes %s", n, d.st.Backstop)
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
	d.awaitBackstops(ctx, 1)
	d.live(1, "running")

	d.step(2, "docker stop: SIGTERM to tether (docker would SIGKILL %s later)", dockerStopKill)
	d.explain("A drain is what tether does when its runner ends: for every live intent, prove the sandbox its own (id, name, labels), delete it, and wait until " + d.title() + " answers 404, then exit.")
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
	d.awaitBackstops(ctx, 2)

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

func (d *Story) phase(what string, took time.Duration) {
	d.phases = append(d.phases, phaseTime{what, took})
}

// live prints what the stand-in says of the sandboxes of one run: every
// sandbox that exists with the run's label, by its own record — the lost
// creates too, whose id the runner never learned — and what ends each if
// no one deletes it.
func (d *Story) live(run int, when string) {
	tag := fmt.Sprintf("run-%d", run)
	how := map[string]string{} // sandbox id → how the runner made it
	for _, r := range d.rowsOf(run) {
		if r.sandbox != "" {
			how[r.sandbox] = r.how
		}
	}
	var alive []string
	gone := 0
	for _, sb := range d.st.Record() {
		if sb.Labels["run"] != tag {
			continue
		}
		if sb.Gone {
			gone++
			continue
		}
		what := fmt.Sprintf("%s (%s, %s)", sb.Name, sb.State, sb.Ends)
		switch {
		case how[sb.ID] == "":
			what += ", a lost create: the runner never learned its id"
		case how[sb.ID] == "unobserved" && d.st.NoBackstop:
			what += ": its id never reached tether; the replay finds it by its name"
		case how[sb.ID] == "unobserved" && sb.Endless:
			what += ": its id never reached tether, so no backstop; the replay finds it by its name"
		case sb.Endless && !d.st.NoBackstop:
			what += ": tether's backstop has not landed yet"
		}
		alive = append(alive, what)
	}
	d.say("%s, %s: %d sandboxes alive, %d gone", d.title(), when, len(alive), gone)
	for _, a := range alive {
		d.say("  alive: %s", a)
	}
}

// awaitBackstops waits, up to backstopWait, until the stand-in's record
// shows tether's backstop on every sandbox the runner of run reported to
// tether (one that no longer runs endless). tether sets it in the
// background after each observe, so the runner's "ready" can come before
// the last one lands: the story shows the sandboxes once it has, not a
// moment before. One that has not landed by then is shown as such.
func (d *Story) awaitBackstops(ctx context.Context, run int) {
	if d.st.NoBackstop {
		return
	}
	reported := map[string]bool{}
	for _, r := range d.rowsOf(run) {
		if r.how == "created" {
			reported[r.sandbox] = true
		}
	}
	deadline := time.NewTimer(backstopWait)
	defer deadline.Stop()
	for {
		pending := 0
		for _, sb := range d.st.Record() {
			if reported[sb.ID] && !sb.Gone && sb.Endless {
				pending++
			}
		}
		if pending == 0 {
			return
		}
		t := time.NewTimer(backstopPoll)
		select {
		case <-t.C:
		case <-deadline.C:
			t.Stop()
			return
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// sandbox is the stand-in's record of one sandbox.
func (d *Story) sandbox(id string) (providers.DemoSandbox, bool) {
	for _, sb := range d.st.Record() {
		if sb.ID == id {
			return sb, true
		}
	}
	return providers.DemoSandbox{}, false
}

func (d *Story) rowsOf(run int) []row {
	var out []row
	for _, r := range d.rows {
		if r.run == run {
			out = append(out, r)
		}
	}
	return out
}

// table prints one row per sandbox: whether tether's journal and the
// stand-in's record agree that it is gone, and by which path it went.
func (d *Story) table() (bool, error) {
	j, err := journal.Open(d.journal(), journal.Options{})
	if err != nil {
		return false, fmt.Errorf("demo: read the journal: %w", err)
	}
	defer j.Close()
	d.say("")
	tw := tabwriter.NewWriter(d.o.Out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "SANDBOX\tCREATED\tENDED BY\tJOURNAL\t%s\tCONFIRMED GONE\n", strings.ToUpper(d.title()))
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
		standState, gone := "never created", false
		if sandbox != "" {
			if sb, ok := d.sandbox(sandbox); ok {
				standState, gone = sb.State, sb.Gone
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
		ok := state == string(intent.Gone) && gone
		all = all && ok
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.name, created, ended, state, standState, d.mark(ok))
	}
	tw.Flush()
	d.say("")
	for _, p := range d.phases {
		d.say("%-48s %s", p.what, p.took.Round(time.Millisecond))
	}
	if all {
		d.say("\n%s every sandbox ended confirmed gone: deleted by tether and answered 404 by %s.", d.mark(true), d.title())
	} else {
		d.say("\n%s some sandboxes are not confirmed gone: tether keeps them in the journal and says so.", d.mark(false))
	}
	d.say("\nTry next:")
	command := "tether demo"
	if d.o.Kind.Name != intent.DefaultProvider {
		command += " " + d.o.Kind.Name
	}
	var next [][2]string
	if d.srv != nil {
		next = append(next,
			[2]string{command + " --faults 429=0.2,5xx=0.1,create-lost=0.3", "the same story under rate limits, server errors and lost creates"},
			[2]string{command + " --verbose", "with every log line of tether"},
			[2]string{"tether demo " + d.o.Kind.Name, "a local " + d.title() + " to run your own runner against (README: Try it locally)"},
			[2]string{"tether doctor --live", "check your own " + d.title() + " account, with one real sandbox created and deleted"})
	} else {
		next = append(next,
			[2]string{command + " --verbose", "with every log line of tether"},
			[2]string{"tether doctor --live", "check " + d.title() + " here as tether will use it, with one real sandbox created and deleted"})
	}
	next = append(next, [2]string{"tether run -- YOUR-RUNNER", "README.md: the three ways to integrate; zero code is the default"})
	for _, l := range next {
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
func (d *Story) explain(text string) {
	if d.o.TTY {
		text = "\033[2m" + text + "\033[0m"
	}
	fmt.Fprintln(d.o.Out, "  "+text)
}

// runningTether is one `tether run` of the story, with its runner's stdout.
type runningTether struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan struct{}
	err   error // of Wait, once done is closed
}

// startTether starts `tether run -- tether demo runner ARGS` on the demo's
// journal, socket and spool, in its own process group so a Ctrl-C on the
// demo's terminal reaches the demo, which then cleans up.
func (d *Story) startTether(ctx context.Context, name string, runnerArgs ...string) (*runningTether, error) {
	args := []string{"run",
		"--journal", d.journal(),
		"--socket", filepath.Join(d.dir, "tether.sock"),
		"--spool", filepath.Join(d.dir, "spool"),
		"--label", "demo=" + name}
	// The sample runner declares every sandbox over the socket and talks
	// to the provider itself; the story shows what tether does when it
	// dies between a create and its report, which a zero-code proxy would
	// otherwise close for it (Stand.Run turns it off).
	args = append(args, d.st.Run...)
	args = append(args, "--", d.o.Tether, "demo", "runner")
	if d.o.Kind.Name != intent.DefaultProvider {
		args = append(args, "--provider", d.o.Kind.Name)
	}
	cmd := exec.Command(d.o.Tether, append(args, runnerArgs...)...)
	cmd.Env = append(os.Environ(), d.st.Env(d.base())...)
	cmd.Env = append(cmd.Env, "TETHER_LOG_FORMAT=text")
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
	p := &runningTether{cmd: cmd, lines: make(chan string, 1024), done: make(chan struct{})}
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
func (d *Story) logLine(line string) {
	if !d.o.Verbose {
		if line = storyLine(line, d.title()); line == "" {
			return
		}
	}
	prefix := "    tether │ "
	if d.o.TTY {
		prefix = "\033[2m" + prefix
		line += "\033[0m"
	}
	fmt.Fprintln(d.o.Out, prefix+line)
}

// logAttr is one key=value of a log line in slog's text format.
var logAttr = regexp.MustCompile(`(\w+)=("(?:[^"\\]|\\.)*"|\S+)`)

// storyLine is what a log line of tether says for the demo's story, or ""
// when it says nothing the demo does not already show; title names the
// provider.
func storyLine(line, title string) string {
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
		return fmt.Sprintf("%s had auto-stop 0: set to %s min, so %s stops it even if tether dies", shortID(attrs["sandbox"]), attrs["minutes"], title)
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
func (d *Story) awaitReady(ctx context.Context, p *runningTether, run int) error {
	timeout := time.NewTimer(phaseTimeout)
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
				r := row{intent: l.Intent, name: l.Name, run: run, how: l.How}
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
			return fmt.Errorf("demo: the runner was not ready within %s", phaseTimeout)
		}
	}
}

// stop sends sig to tether alone (not its group: docker stop signals PID 1)
// and waits for it to exit.
func (p *runningTether) stop(ctx context.Context, sig syscall.Signal) (int, error) {
	if err := p.cmd.Process.Signal(sig); err != nil {
		return 0, fmt.Errorf("demo: signal tether: %w", err)
	}
	return p.wait(ctx)
}

func (p *runningTether) wait(ctx context.Context) (int, error) {
	go func() {
		for range p.lines { // keep the pipe flowing
		}
	}()
	timeout := time.NewTimer(phaseTimeout)
	defer timeout.Stop()
	select {
	case <-p.done:
	case <-ctx.Done():
		return 0, fmt.Errorf("demo: interrupted")
	case <-timeout.C:
		return 0, fmt.Errorf("demo: tether did not exit within %s", phaseTimeout)
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
