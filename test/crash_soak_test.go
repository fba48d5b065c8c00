package e2e_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tether-run/tether/internal/crashpoint"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
	"github.com/tether-run/tether/provider/docker/dockertest"
	"github.com/tether-run/tether/provider/e2b/e2btest"
)

// The seeded soak: one journal, one simulated account in each cloud, many
// runner cycles. Each cycle draws from one seeded source an intake, the
// runner's creates and deletes, a crash point (or none) and a mix of
// simulator faults, and from a second one the cloud the runner creates in
// (Daytona, or E2B one cycle in three, with E2B's faults); it runs runner +
// tether through it, and checks the invariants against both simulators'
// records; the next cycle's tether restarts on the same journal. A last
// cycle without faults or crashes must leave nothing behind.
//
//	TETHER_SOAK=200 TETHER_SOAK_SEED=7 go test ./test -run TestCrashSoak -v -timeout 2h
//
// TETHER_SOAK_CLOUDS=daytona runs Daytona cycles only, in a world without
// E2B: the first source draws the same cycles either way.
// TETHER_SOAK_CLOUDS=all adds a simulated Docker engine (dockertest): a
// third source makes one cycle in four a Docker one, with its own faults
// (create answers lost after the engine made the container, slow creates),
// and the first two draw what they draw without it.
//
// Without TETHER_SOAK, a short soak runs (soakShortCycles, seed
// soakDefaultSeed). TETHER_SOAK_FAULTS=404,destroy-lag (or all) raises two
// faults of the default mix from their low rate to full strength: a
// transient 404 for a sandbox that exists, and a deleted sandbox renamed
// DESTROYED_... while its state still lags (docs/reliability.md).
const (
	envSoak         = "TETHER_SOAK"
	envSoakSeed     = "TETHER_SOAK_SEED"
	envSoakFaults   = "TETHER_SOAK_FAULTS"
	envSoakClouds   = "TETHER_SOAK_CLOUDS"
	soakShortCycles = 8
	soakDefaultSeed = 1
)

// soakStats is what a soak did, for docs/reliability.md.
type soakStats struct {
	cycles, crashes, sandboxes int
	e2bCycles, e2bCrashes      int
	e2bSandboxes               int
	dockerCycles               int
	leftLive                   int // intents a drain left live, each found in its report
	points                     map[string]int
	answers                    map[int]int // error answers by status, faults and real 404s
	aborted                    int         // calls hung or dropped without an answer
}

func TestCrashSoak(t *testing.T) {
	t.Parallel()
	cycles := soakShortCycles
	if v := os.Getenv(envSoak); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a number of cycles", envSoak, v)
		}
		cycles = n
	}
	seed := uint64(soakDefaultSeed)
	if v := os.Getenv(envSoakSeed); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want a number", envSoakSeed, v)
		}
		seed = n
	} else if os.Getenv(envSoak) != "" {
		seed = uint64(time.Now().UnixNano())
	}
	extra := map[string]bool{}
	for _, f := range strings.Split(os.Getenv(envSoakFaults), ",") {
		switch f {
		case "":
		case "all":
			extra["404"], extra["destroy-lag"] = true, true
		case "404", "destroy-lag":
			extra[f] = true
		default:
			t.Fatalf("%s=%q: want all, 404 or destroy-lag (comma-separated)", envSoakFaults, os.Getenv(envSoakFaults))
		}
	}
	t.Logf("soak: %d cycles, seed %d (replay: %s=%d %s=%d)", cycles, seed, envSoak, cycles, envSoakSeed, seed)
	cycle := 0
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("soak FAILED in cycle %d of %d; replay with %s=%d %s=%d %s=%s", cycle, cycles, envSoak, cycles, envSoakSeed, seed, envSoakFaults, os.Getenv(envSoakFaults))
		}
	})

	var w *world
	var ew *e2bWorld
	var dw *dockerWorld
	var rec simRecord
	switch v := os.Getenv(envSoakClouds); v {
	case "daytona":
		w = newWorld(t)
		rec = daytonaRecord{w}
	case "", "both":
		ew = newE2BWorld(t)
		w = ew.world
		rec = records{daytonaRecord{w}, e2bRecord{ew}}
	case "all":
		ew = newE2BWorld(t)
		w = ew.world
		dw = withDocker(t, w)
		rec = records{daytonaRecord{w}, e2bRecord{ew}, dockerRecord{dw}}
	default:
		t.Fatalf("%s=%q: want daytona, both or all", envSoakClouds, v)
	}
	w.plantOtherAccount()
	front := w.countAnswers()
	tetherBin, runnerBin := crashBinaries(t)
	rng := rand.New(rand.NewPCG(seed, seed^0x7e7e7e7e))
	rngCloud := rand.New(rand.NewPCG(seed, seed^0xe2b))
	rngDocker := rand.New(rand.NewPCG(seed, seed^0xd0c))
	st := soakStats{points: map[string]int{}}

	for cycle = 1; cycle <= cycles; cycle++ {
		c := drawCycle(rng, extra)
		if ew != nil {
			drawCloud(rngCloud, &c)
		}
		if dw != nil {
			drawDocker(rngDocker, &c)
		}
		t.Logf("cycle %d: %s %s %v crash %q at %s; drain %s; faults %s", cycle, c.cloud, c.intake, c.actions, c.point, c.at, c.drain, c.faultsString())
		w.sim.SetFaults(c.faults)
		switch c.cloud {
		case cloudE2B:
			st.e2bCycles++
			ew.e2b.SetFaults(c.e2bFaults)
		case cloudDocker:
			st.dockerCycles++
			dw.engine.SetFaults(c.dockerFaults)
		}
		crashed, reported := w.soakCycle(rec, c, tetherBin, runnerBin)
		st.leftLive += reported
		if crashed {
			st.crashes++
			if c.cloud == cloudE2B {
				st.e2bCrashes++
			}
			name, _, _ := strings.Cut(c.point, ":")
			st.points[name]++
		}
		w.sim.SetFaults(daytonatest.Faults{})
		if ew != nil {
			ew.e2b.SetFaults(e2btest.Faults{})
		}
		if dw != nil {
			dw.engine.SetFaults(dockertest.Faults{})
		}
		w.checkInvariants(rec, false)
		if t.Failed() {
			return
		}
	}
	cycle = cycles + 1 // the last, clean one
	args := append(w.tetherArgs("run"), crashFlags(cloudDaytona, "socket")...)
	args = append(args, runnerArgs(runnerBin, cloudDaytona, "socket", "exit")...)
	if code := w.startBin(bin.tether, nil, args...).wait(); code != 0 {
		t.Errorf("the last run exited %d, want 0", code)
	}
	if code, stderr := w.runTether("drain", "--journal", w.journal, "--never-created-after", crashNeverCreated); code != 0 {
		t.Errorf("the last drain exited %d; stderr:\n%s", code, stderr)
	}
	st.cycles = cycles
	st.sandboxes = w.checkInvariants(rec, true)
	if ew != nil {
		st.e2bSandboxes = len(e2bRecord{ew}.ours())
	}
	st.answers, st.aborted = front.counts()
	var points []string
	for p, n := range st.points {
		points = append(points, fmt.Sprintf("%s=%d", p, n))
	}
	sort.Strings(points)
	if dw != nil {
		t.Logf("soak: %d Docker cycles, %d containers of ours", st.dockerCycles, len(dockerRecord{dw}.ours()))
	}
	t.Logf("soak: seed %d, %d cycles (%d E2B), %d crashes (%d in E2B cycles; by point %s), %d sandboxes of ours (%d in E2B), %d intents left live by a drain and reported, Daytona's error answers by status %v, %d calls hung or dropped; outcome: %s",
		seed, st.cycles, st.e2bCycles, st.crashes, st.e2bCrashes, strings.Join(points, " "), st.sandboxes, st.e2bSandboxes, st.leftLive, st.answers, st.aborted, map[bool]string{false: "pass", true: "FAIL"}[t.Failed()])
}

// soakCase is one cycle.
type soakCase struct {
	cloud   string // where the runner creates
	intake  string
	actions []string
	point   string // "" for a cycle without a crash
	at      string
	faults  daytonatest.Faults
	// e2bFaults: E2B's faults, for an E2B cycle.
	e2bFaults e2btest.Faults
	// dockerFaults: the engine's, for a Docker cycle.
	dockerFaults dockertest.Faults
	// drain is the cycle's --drain-timeout: now and then too short, so a
	// drain leaves intents live and must report them.
	drain string
}

// drawCycle draws one cycle from rng.
func drawCycle(rng *rand.Rand, extra map[string]bool) soakCase {
	intakes := []string{"socket", "spool", "proxy"}
	c := soakCase{cloud: cloudDaytona, intake: intakes[rng.IntN(len(intakes))], drain: []string{drainTimeout, drainTimeout, "1s"}[rng.IntN(3)]}
	ops := []string{"create", "create", "delete", "unobserved", "declare"}
	if c.intake == "proxy" {
		ops = ops[:3]
	}
	for range 1 + rng.IntN(6) {
		c.actions = append(c.actions, ops[rng.IntN(len(ops))])
	}
	if rng.IntN(5) > 0 {
		var fit []crashCase
		for _, cc := range crashCases() {
			if cc.intake == c.intake && cc.cloud == cloudDaytona {
				fit = append(fit, cc)
			}
		}
		cc := fit[rng.IntN(len(fit))]
		name, _, _ := strings.Cut(cc.point, ":")
		n := 1 + rng.IntN(2)
		if name == crashpoint.ReplayStarted {
			n = 1 // once per process
		}
		c.point, c.at = name+":"+strconv.Itoa(n), cc.at
	}
	pick := func(rates ...float64) float64 { return rates[rng.IntN(len(rates))] }
	c.faults = daytonatest.Faults{
		Seed:         rng.Int64(),
		Latency:      time.Duration(pick(0, 0, 2, 10)) * time.Millisecond,
		Rate429:      pick(0, 0.05, 0.15),
		Rate5xx:      pick(0, 0.05, 0.15),
		Rate403:      pick(0, 0, 0.05),
		RetryAfter:   time.Duration(pick(0, 1)) * time.Second,
		CreateLost:   pick(0, 0.2),
		Destroying:   time.Duration(pick(0, 100, 300)) * time.Millisecond,
		Starting:     time.Duration(pick(0, 0, 100)) * time.Millisecond,
		RateModified: pick(0, 0.1),
	}
	// A transient 404 for a sandbox that exists and the state lag after a
	// delete, in half the cycles each: at a low rate by default (1% of
	// the calls naming a sandbox, up to 50 ms), at full strength with
	// TETHER_SOAK_FAULTS (5%, up to 200 ms). A seed draws the same cycles
	// either way.
	rate404, lag := pick(0, 0.05), time.Duration(pick(0, 200))*time.Millisecond
	c.faults.Rate404, c.faults.DestroyLag = rate404/5, lag/4
	if extra["404"] {
		c.faults.Rate404 = rate404
	}
	if extra["destroy-lag"] {
		c.faults.DestroyLag = lag
	}
	return c
}

// drawCloud draws from rng whether cycle c creates in E2B, and E2B's
// faults (drawn for every cycle, so that a seed draws the same ones
// whatever the cycles before chose). An E2B cycle keeps c's intake,
// actions and crash point: every point of the Daytona matrix lies on the
// same path under E2B.
func drawCloud(rng *rand.Rand, c *soakCase) {
	e2bCycle := rng.IntN(3) == 0
	f := drawE2BFaults(rng)
	if e2bCycle {
		c.cloud, c.e2bFaults = cloudE2B, f
	}
}

// drawDocker draws from rng whether cycle c creates in the simulated
// Docker engine, and its faults (drawn every cycle, as drawCloud does). A
// Docker cycle keeps c's intake, actions and crash point, but a crash
// point of the drain or the replay: the matrix's Docker cases cover the
// intakes' and the runner's points, and the drain's on the proxy's path.
func drawDocker(rng *rand.Rand, c *soakCase) {
	dockerCycle := rng.IntN(4) == 0
	f := dockertest.Faults{LoseCreateAnswer: rng.IntN(4) == 0, CreateDelay: time.Duration(rng.IntN(3)*20) * time.Millisecond}
	if dockerCycle {
		c.cloud, c.dockerFaults = cloudDocker, f
	}
}

func (c soakCase) faultsString() string {
	if c.cloud == cloudDocker {
		return fmt.Sprintf("%s, Docker %+v", c.faults, c.dockerFaults)
	}
	if c.cloud == cloudE2B {
		return fmt.Sprintf("%s, E2B %s", c.faults, c.e2bFaults)
	}
	return c.faults.String()
}

// soakCycle runs one cycle and reports whether it crashed where it meant to,
// and how many intents its drain left live (each checked to be reported).
func (w *world) soakCycle(rec simRecord, c soakCase, tetherBin, runnerBin string) (crashed bool, reported int) {
	t := w.t
	var env []string
	if c.point != "" {
		env = []string{crashpoint.Env + "=" + c.point}
	}
	args := append(append(w.tetherArgs("run"), crashFlags(c.cloud, c.intake)...), "--drain-timeout", c.drain)
	args = append(args, runnerArgs(runnerBin, c.cloud, c.intake, c.actions...)...)
	p := w.startBin(tetherBin, env, args...)
	out, ready := p.collect()
	if ready {
		// The runner holds: stop it as docker stop would; a crash point
		// of the drain fires now, or the drain ends normally. A crash
		// point at an intake may have fired after "ready" (the spool
		// intake takes the runner's files asynchronously), so tether may
		// be gone already: its exit code and stderr judge below.
		if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			t.Fatalf("signal tether: %v", err)
		}
	}
	code := p.wait()
	name, _, _ := strings.Cut(c.point, ":")
	crashed = c.point != "" && strings.Contains(p.stderr.String(), "crashpoint: "+name+" hit")
	if !crashed && code != 128+int(syscall.SIGTERM) && code != 0 && code != 1 {
		// 1: the runner gave up on a call the faults broke.
		t.Errorf("tether exited %d without crashing; stderr:\n%s", code, p.stderr)
	}
	w.checkAcked(rec, c.intake, out)
	if code != 137 {
		reported = w.checkReport(p.stderr.String())
	}
	return crashed, reported
}

// checkReport: a tether that ended with its drain (it was not killed)
// reported by name every intent it left live, and so every sandbox of ours
// still alive whose intent is live.
func (w *world) checkReport(stderr string) (live int) {
	t := w.t
	recorded := w.intents()
	rep, ok := parseReport(stderr)
	for id, in := range recorded {
		if !in.Live() {
			continue
		}
		live++
		if !ok {
			t.Errorf("intent %s (%s) is live after a drain that printed no report", id, in.Name)
			continue
		}
		if it, named := rep.unresolved[id]; !named || it.name != in.Name {
			t.Errorf("intent %s (%s, %s) is live but the report does not name it (%+v)", id, in.Name, in.State, it)
		}
	}
	return live
}

// answerCounter counts the simulator's error answers, in front of it.
type answerCounter struct {
	mu      sync.Mutex
	status  map[int]int
	aborted int
}

// countAnswers puts a counting front before the simulator and points every
// process the world starts from now on at it.
func (w *world) countAnswers() *answerCounter {
	c := &answerCounter{status: map[int]int{}}
	h := w.sim.Handler()
	front := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: rw}
		defer func() {
			c.mu.Lock()
			switch {
			case rec.status == 0:
				c.aborted++
			case rec.status >= 400:
				c.status[rec.status]++
			}
			c.mu.Unlock()
		}()
		h.ServeHTTP(rec, r)
	}))
	w.t.Cleanup(front.Close)
	w.env = append(w.env, "DAYTONA_API_URL="+front.URL+"/api")
	return c
}

func (c *answerCounter) counts() (map[int]int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[int]int, len(c.status))
	for k, v := range c.status {
		out[k] = v
	}
	return out, c.aborted
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
