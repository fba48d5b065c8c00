package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tether-run/tether/journal"
)

// Config is one fleet rollout to measure.
type Config struct {
	Tether    string // the tether binary (also the sample runner: tether demo runner)
	Cloud     string // daytona or e2b
	Replicas  int    // N: tether run processes, each with its runner
	Sandboxes int    // S: sandboxes each runner creates and holds

	// The account's quota during the drain: Limit requests per Window on
	// each throttler (Daytona) or route (E2B) a drain uses; see setQuota.
	Limit  int
	Window time.Duration

	Grace        time.Duration // TETHER_GRACE
	DrainTimeout time.Duration // TETHER_DRAIN_TIMEOUT
	// KillAfter is the stop timeout (a pod's terminationGracePeriodSeconds,
	// docker stop's -t): a tether still running this long after its
	// SIGTERM is SIGKILLed.
	KillAfter time.Duration
	Latency   time.Duration // added to every simulated API call
	// RestoreWindow, when set, is every tether's TETHER_E2B_RESTORE_WINDOW
	// (default 10 s): how long a 404 after a kill not preceded by a read
	// of the sandbox running waits to be proof. The replays wait it for
	// every kill the fleet's drain left unconfirmed.
	RestoreWindow time.Duration
	// ReplayUnthrottled turns the quota off before the replays: what they
	// catch is counted, not how fast the quota lets them.
	ReplayUnthrottled bool
	// StartParallel bounds how many replicas start (and create their
	// sandboxes) at once; the start is not what is measured.
	StartParallel int
	// Catchers: after the fleet is gone, run the catchers (a replay of
	// each journal, the sweep) and count what each takes.
	Catchers bool
	Log      io.Writer // progress; nil: none
	Dir      string    // work directory (journals, logs); "": a temp dir, removed
}

// Result is what one rollout did, judged by the simulated account's record
// and by the answers it gave, never by tether's word alone.
type Result struct {
	Config
	Created int // sandboxes live before the signal (the simulator's record)

	// The quota-limited ideal: what the quota lets a perfect fleet delete
	// within the drain deadline, and how long deleting them all takes.
	IdealGone int
	IdealAll  time.Duration
	// IdealPaired is what it lets a perfect fleet delete if each delete
	// costs one read as well (the read before E2B's kill, Daytona's
	// verifying read): on E2B the two share the bucket.
	IdealPaired int

	GoneByDeadline int           // deletes accepted within DrainTimeout of the signal
	GoneAtExit     int           // accepted by the time the last tether exited (or was killed)
	LastDelete     time.Duration // after the signal, of the last accepted delete
	Confirmed      int           // intents the tethers' reports close as gone

	TetherExit []time.Duration // per tether: signal to exit
	Killed     int             // tethers SIGKILLed at KillAfter
	Starved    int             // tethers none of whose sandboxes was deleted in time

	Calls   map[string]int // during the drain: "delete 200", "get 429", ...
	Refused int            // 429s answered during the drain
	Served  int            // answers other than 429
	HungUp  int            // requests the client gave up on before an answer (a drain's deadline)

	// Left live by the fleet (the simulator's record), and who catches them.
	LeftLive    int
	Journaled   int // live in a journal: a replay (a restart on it, tether drain) gets it
	Backstopped int // Daytona: auto-stop set (tether's backstop); E2B: its timeout ends it
	Sweepable   int // a sweep's dry run marks it for deletion (Daytona: idle and old enough)
	HandedOff   int // left to the provider's own timers by a drain (sandbox.handedOff); also counted as backstopped
	// ReportedHandOff: what the tethers' reports say they handed off.
	ReportedHandOff int
	NoCatcher       int // none of the above
	MaxEndsIn       time.Duration

	ReplayGone int           // left ones a replay (tether drain on each journal) deleted
	ReplayTime time.Duration // those drains, from the first start to the last exit
	SweepGone  int           // left ones the sweep then deleted
	FinalLive  int           // still live at the end (E2B: until their timeout)

	Load string // /proc/loadavg at the signal
}

func (c *Config) defaults() {
	if c.Grace == 0 {
		c.Grace = 3 * time.Second
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 5 * time.Second
	}
	if c.KillAfter == 0 {
		c.KillAfter = 10 * time.Second
	}
	if c.StartParallel == 0 {
		c.StartParallel = 8
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// ideal is what the quota allows a fleet that never wastes a request,
// starting on fresh counters at the signal: the deletes it can send within
// the drain deadline, and the time it takes to send all of them.
//
// Daytona counts DELETE against `sandbox-lifecycle` alone, in fixed windows
// that start at a window's first request (e2b-facts section 9), so windows
// start at 0, W, 2W...: ceil(D/W) of them begin inside a deadline D. The
// confirming reads go to `authenticated`, a counter of their own.
//
// E2B's kill shares its route's GCRA bucket with the read: a burst of
// Limit, then Limit per Window; a drain that sends every kill before any
// confirming read gets Limit + Limit*D/W kills in.
func ideal(cloud string, total, limit int, window, deadline time.Duration) (gone int, all time.Duration) {
	if limit <= 0 {
		return total, 0
	}
	if cloud == "daytona" {
		windows := int(math.Ceil(deadline.Seconds() / window.Seconds()))
		gone = min(total, limit*windows)
		all = time.Duration((total+limit-1)/limit-1) * window
		return gone, all
	}
	gone = min(total, limit+int(float64(limit)*deadline.Seconds()/window.Seconds()))
	if total > limit {
		all = time.Duration(float64(total-limit) / float64(limit) * float64(window))
	}
	return gone, all
}

// idealPaired is what the quota allows a perfect fleet that sends one
// read with each delete: on Daytona the reads count against
// `authenticated`, not the deletes' counter, so it is ideal's; on E2B the
// read and the kill share the route's bucket, so half of what ideal sends.
// tether reads an E2B sandbox right before its first kill (what makes the
// kill's 204 final: docs/ARCHITECTURE.md); the issue that asked for this
// bench counted "1 read + 1 delete each".
func idealPaired(cloud string, total, limit int, window, deadline time.Duration) int {
	if limit <= 0 || cloud == "daytona" {
		gone, _ := ideal(cloud, total, limit, window, deadline)
		return gone
	}
	return min(total, (limit+int(float64(limit)*deadline.Seconds()/window.Seconds()))/2)
}

type replica struct {
	i       int
	dir     string
	cmd     *exec.Cmd
	exited  chan struct{}
	exitAt  time.Time
	stderr  string // path of its stderr
	sandbox []string
}

func (r *replica) journal() string { return filepath.Join(r.dir, "journal.db") }

// Run plays one rollout.
func Run(ctx context.Context, cfg Config) (res Result, err error) {
	cfg.defaults()
	res.Config = cfg
	dir := cfg.Dir
	if dir != "" {
		dir = filepath.Join(dir, fmt.Sprintf("%s-%d", cfg.Cloud, cfg.Replicas))
	} else {
		// Short: a Unix socket path must fit in about 100 bytes.
		if dir, err = os.MkdirTemp("", "fleet"); err != nil {
			return res, err
		}
		defer os.RemoveAll(dir)
	}
	cl, err := newCloud(cfg.Cloud, cfg.Latency)
	if err != nil {
		return res, err
	}
	defer cl.close()

	// Start the replicas, StartParallel at a time, each until its runner
	// says ready (its sandboxes created and reported).
	reps := make([]*replica, cfg.Replicas)
	defer func() {
		for _, r := range reps {
			if r != nil && r.cmd.Process != nil {
				select {
				case <-r.exited:
				default:
					_ = r.cmd.Process.Kill()
					<-r.exited
				}
			}
		}
	}()
	fmt.Fprintf(cfg.Log, "fleet: %s, %d replicas x %d sandboxes: starting\n", cfg.Cloud, cfg.Replicas, cfg.Sandboxes)
	start := time.Now()
	sem := make(chan struct{}, cfg.StartParallel)
	errs := make(chan error, cfg.Replicas)
	var wg sync.WaitGroup
	for i := range reps {
		r := &replica{i: i, dir: filepath.Join(dir, strconv.Itoa(i)), exited: make(chan struct{})}
		reps[i] = r
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := startReplica(ctx, cfg, cl, r); err != nil {
				errs <- fmt.Errorf("replica %d: %w", r.i, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := errors.Join(slices.Collect(chanSeq(errs))...); err != nil {
		return res, err
	}
	for _, sb := range cl.sandboxes() {
		if sb.live {
			res.Created++
		}
	}
	fmt.Fprintf(cfg.Log, "fleet: %d sandboxes live after %s\n", res.Created, time.Since(start).Round(time.Millisecond))
	if want := cfg.Replicas * cfg.Sandboxes; res.Created != want {
		return res, fmt.Errorf("%d sandboxes live, want %d", res.Created, want)
	}
	res.IdealGone, res.IdealAll = ideal(cfg.Cloud, res.Created, cfg.Limit, cfg.Window, cfg.DrainTimeout)
	res.IdealPaired = idealPaired(cfg.Cloud, res.Created, cfg.Limit, cfg.Window, cfg.DrainTimeout)

	// The rollout: the quota on (fresh counters), every replica SIGTERMed
	// at once, SIGKILLed at KillAfter if still running.
	cl.setQuota(cfg.Limit, cfg.Window)
	time.Sleep(100 * time.Millisecond)
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		res.Load = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	t0 := time.Now()
	cl.rec.start(t0)
	for _, r := range reps {
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
	}
	kill := time.AfterFunc(cfg.KillAfter, func() {
		for _, r := range reps {
			select {
			case <-r.exited:
			default:
				_ = r.cmd.Process.Kill()
			}
		}
	})
	for _, r := range reps {
		<-r.exited
		res.TetherExit = append(res.TetherExit, r.exitAt.Sub(t0))
		if r.exitAt.Sub(t0) >= cfg.KillAfter {
			res.Killed++
		}
	}
	kill.Stop()
	cl.rec.stop()
	lastExit := slices.Max(res.TetherExit)
	calls, deleted := cl.rec.snapshot()
	res.Calls = calls
	for k, n := range calls {
		switch {
		case strings.HasSuffix(k, " 429"):
			res.Refused += n
		case strings.HasSuffix(k, " 0"):
			res.HungUp += n
		default:
			res.Served += n
		}
	}
	for _, at := range deleted {
		if at <= cfg.DrainTimeout {
			res.GoneByDeadline++
		}
		if at <= lastExit {
			res.GoneAtExit++
		}
		res.LastDelete = max(res.LastDelete, at)
	}
	for _, r := range reps {
		gone := 0
		for _, id := range r.sandbox {
			if at, ok := deleted[id]; ok && at <= cfg.DrainTimeout {
				gone++
			}
		}
		if gone == 0 {
			res.Starved++
		}
		res.Confirmed += reported(goneLine, r.stderr)
		res.ReportedHandOff += reported(handedOffLine, r.stderr)
	}
	fmt.Fprintf(cfg.Log, "fleet: deletes accepted by half second after the signal: %v\n", histogram(deleted, 500*time.Millisecond))
	tl := cl.rec.timelines()
	for _, k := range slices.Sorted(maps.Keys(tl)) {
		fmt.Fprintf(cfg.Log, "fleet: %-10s by quarter second: %v\n", k, tl[k])
	}
	fmt.Fprintf(cfg.Log, "fleet: every tether exited within %s; %d deletes accepted (%d within the drain deadline), %d 429s\n",
		lastExit.Round(time.Millisecond), len(deleted), res.GoneByDeadline, res.Refused)

	// What the fleet left live, and who catches it.
	if err := catchers(ctx, cfg, cl, reps, &res); err != nil {
		return res, err
	}
	return res, nil
}

func chanSeq[T any](c <-chan T) func(func(T) bool) {
	return func(yield func(T) bool) {
		for v := range c {
			if !yield(v) {
				return
			}
		}
	}
}

// baseEnv is the environment of every process the bench starts: no
// provider or tether setting of the caller's leaks in.
func baseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "DAYTONA_") || strings.HasPrefix(kv, "E2B_") || strings.HasPrefix(kv, "TETHER_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

func replicaEnv(cfg Config, cl *cloud, dir string) []string {
	env := append(baseEnv(), cl.env()...)
	env = append(env,
		"TETHER_JOURNAL="+filepath.Join(dir, "journal.db"),
		"TETHER_SOCKET="+filepath.Join(dir, "s"),
		"TETHER_SPOOL="+filepath.Join(dir, "spool"),
		"TETHER_GRACE="+cfg.Grace.String(),
		"TETHER_DRAIN_TIMEOUT="+cfg.DrainTimeout.String(),
		"TETHER_LOG_LEVEL=warn",
		// A cloud fleet's pods have no Docker engine: without this, every
		// replica on a machine that has one would open its proxy and
		// check the engine at start, as a fleet never would.
		"TETHER_DOCKER=false",
	)
	if cfg.RestoreWindow > 0 {
		env = append(env, "TETHER_E2B_RESTORE_WINDOW="+cfg.RestoreWindow.String())
	}
	return env
}

// startReplica starts `tether run -- tether demo runner` and waits for the
// runner's "ready": its sandboxes created and reported to tether.
func startReplica(ctx context.Context, cfg Config, cl *cloud, r *replica) error {
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return err
	}
	r.stderr = filepath.Join(r.dir, "stderr")
	errf, err := os.Create(r.stderr)
	if err != nil {
		return err
	}
	defer errf.Close()
	out, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	r.cmd = exec.Command(cfg.Tether, "run", "--", cfg.Tether, "demo", "runner",
		"--sandboxes", strconv.Itoa(cfg.Sandboxes), "--provider", cfg.Cloud, "--label", "fleet-"+strconv.Itoa(r.i))
	r.cmd.Env = replicaEnv(cfg, cl, r.dir)
	r.cmd.Stdout, r.cmd.Stderr = outW, errf
	// Its own process group, as a container's PID 1; and dead with the
	// bench, should the bench die first.
	r.cmd.SysProcAttr = childAttr(true)
	err = r.cmd.Start()
	outW.Close()
	if err != nil {
		out.Close()
		close(r.exited)
		return err
	}
	go func() {
		_ = r.cmd.Wait()
		r.exitAt = time.Now()
		close(r.exited)
	}()
	ready := make(chan struct{})
	go func() {
		defer out.Close()
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 4 && f[0] == "created":
				r.sandbox = append(r.sandbox, f[3])
			case len(f) == 1 && f[0] == "ready":
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
		return nil
	case <-r.exited:
		b, _ := os.ReadFile(r.stderr)
		return fmt.Errorf("tether exited before its runner was ready: %s", lastLines(string(b), 5))
	case <-time.After(2 * time.Minute):
		return errors.New("runner not ready within 2m")
	case <-ctx.Done():
		return ctx.Err()
	}
}

var (
	goneLine      = regexp.MustCompile(`(?m)^tether:\s+gone\s+(\d+)$`)
	handedOffLine = regexp.MustCompile(`(?m)^tether:\s+handed off\s+(\d+) `)
)

// reported is the count a drain report's line gives (line's first
// group), summed over a tether's stderr.
func reported(line *regexp.Regexp, path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n := 0
	for _, m := range line.FindAllStringSubmatch(string(b), -1) {
		v, _ := strconv.Atoi(m[1])
		n += v
	}
	return n
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// catchers counts, for every sandbox the fleet left live, who would catch
// it (without touching it: its journal, the backstop's setting, a sweep's
// dry run), then lets them act: a replay of each journal (tether drain on
// it, as a restart on a kept volume does), then a sweep for what is left.
func catchers(ctx context.Context, cfg Config, cl *cloud, reps []*replica, res *Result) error {
	left := map[string]sandbox{}
	for _, sb := range cl.sandboxes() {
		if sb.live {
			left[sb.id] = sb
		}
	}
	res.LeftLive = len(left)
	journaled := map[string]bool{}
	var withLive []*replica
	for _, r := range reps {
		j, err := journal.OpenReadOnly(r.journal(), time.Second)
		if err != nil {
			return fmt.Errorf("replica %d: journal: %w", r.i, err)
		}
		live, err := j.Live()
		j.Close()
		if err != nil {
			return fmt.Errorf("replica %d: journal: %w", r.i, err)
		}
		if len(live) > 0 {
			withLive = append(withLive, r)
		}
		for _, in := range live {
			journaled[in.SandboxID] = true
		}
	}
	if !cfg.Catchers || len(left) == 0 {
		return nil
	}
	swept := map[string]bool{}
	if cl.daytona != nil {
		// The sweep's own rule, shrunk to the bench's time scale: what it
		// lists as stale here, it deletes once the sandbox is 24 h old and
		// 2 h idle (its defaults).
		items, err := sweep(ctx, cfg, cl, false)
		if err != nil {
			return err
		}
		for _, it := range items {
			if it.Action == "delete" {
				swept[it.ID] = true
			}
		}
	}
	for id, sb := range left {
		caught := false
		if journaled[id] {
			res.Journaled++
			caught = true
		}
		if sb.handedOff(cfg.Cloud) {
			res.HandedOff++
		}
		if sb.autoStop > 0 || cl.e2b != nil && sb.endsIn > 0 {
			res.Backstopped++
			caught = true
			res.MaxEndsIn = max(res.MaxEndsIn, sb.endsIn)
		}
		if swept[id] {
			res.Sweepable++
			caught = true
		}
		if !caught {
			res.NoCatcher++
		}
	}
	fmt.Fprintf(cfg.Log, "fleet: %d left live: %d journaled, %d backstopped (%d of them handed off; the tethers' reports say %d), %d sweepable, %d without a catcher\n",
		res.LeftLive, res.Journaled, res.Backstopped, res.HandedOff, res.ReportedHandOff, res.Sweepable, res.NoCatcher)

	// The replay: tether drain on each journal with live intents, a few at
	// a time (restarts are not simultaneous), under the same quota (unless
	// ReplayUnthrottled).
	if cfg.ReplayUnthrottled {
		cl.setQuota(0, 0)
	}
	t := time.Now()
	sem := make(chan struct{}, cfg.StartParallel)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, r := range withLive {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			cmd := exec.CommandContext(ctx, cfg.Tether, "drain", "--drain-timeout", "2m")
			cmd.Env = replicaEnv(cfg, cl, r.dir)
			cmd.SysProcAttr = childAttr(false)
			// A drain that leaves intents live exits non-zero: counted
			// below by the simulator's record, said here.
			b, err := cmd.CombinedOutput()
			_ = os.WriteFile(filepath.Join(r.dir, "replay"), b, 0o600)
			if err != nil {
				mu.Lock()
				fmt.Fprintf(cfg.Log, "fleet: replica %d: tether drain: %v: %s\n", r.i, err, lastLines(string(b), 3))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	res.ReplayTime = time.Since(t)
	after := map[string]bool{}
	for _, sb := range cl.sandboxes() {
		if sb.live {
			after[sb.id] = true
		}
	}
	for id := range left {
		if !after[id] {
			res.ReplayGone++
		}
	}
	if cl.daytona != nil && len(after) > 0 {
		if _, err := sweep(ctx, cfg, cl, true); err != nil {
			return err
		}
		for _, sb := range cl.sandboxes() {
			if after[sb.id] && !sb.live {
				res.SweepGone++
			}
		}
	}
	for _, sb := range cl.sandboxes() {
		if sb.live {
			res.FinalLive++
		}
	}
	fmt.Fprintf(cfg.Log, "fleet: the replays deleted %d in %s, the sweep %d; %d still live\n",
		res.ReplayGone, res.ReplayTime.Round(time.Millisecond), res.SweepGone, res.FinalLive)
	return nil
}

type sweepItem struct {
	ID     string `json:"id"`
	Action string `json:"action"`
}

// sweep runs tether sweep on the account, with its age and idle rule
// shrunk to a millisecond (the bench cannot wait a day).
func sweep(ctx context.Context, cfg Config, cl *cloud, yes bool) ([]sweepItem, error) {
	args := []string{"sweep", "--json", "--older-than", "1ms", "--idle-for", "1ms", "--provider", cfg.Cloud, "--timeout", "2m"}
	if yes {
		args = append(args, "--yes")
	}
	cmd := exec.CommandContext(ctx, cfg.Tether, args...)
	cmd.Env = append(baseEnv(), cl.env()...)
	cmd.SysProcAttr = childAttr(false)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	var rep struct {
		Items []sweepItem `json:"items"`
	}
	// A sweep that could not confirm every stale sandbox deleted exits
	// non-zero with its report: the simulator's record counts the rest.
	if jerr := json.Unmarshal(b, &rep); jerr != nil {
		return nil, fmt.Errorf("tether %s: %w: %s", strings.Join(args, " "), errors.Join(err, jerr), lastLines(stderr.String(), 5))
	}
	if err != nil {
		fmt.Fprintf(cfg.Log, "fleet: tether sweep: %v: %s\n", err, lastLines(stderr.String(), 3))
	}
	return rep.Items, nil
}

// quantile of ds (sorted in place), q in [0, 1], nearest rank.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(math.Ceil(q*float64(len(ds)))) - 1
	return ds[max(0, min(i, len(ds)-1))]
}

// histogram counts the times in ds by bucket of width w from 0.
func histogram(ds map[string]time.Duration, w time.Duration) []int {
	var out []int
	for _, d := range ds {
		i := int(d / w)
		for len(out) <= i {
			out = append(out, 0)
		}
		out[i]++
	}
	return out
}
