package e2e_test

import (
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/crashpoint"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider/e2b"
	"github.com/tether-run/tether/provider/e2b/e2btest"
)

// The crash-point matrix and the soak for the E2B provider, at the drain:
// a journal holding E2B intents of every kind (observed, lost creates
// known only by tether's metadata, declared and never created, auto-paused,
// released by the runner, to be stopped, declared under another account)
// is drained by the real `tether drain` built with -tags crashpoints, with
// E2B credentials only, which dies of SIGKILL at the named point; a second
// drain on the same journal finishes. The simulated
// E2B API's record of every sandbox judges, against the journal: no
// sandbox of ours is left (no leak), no intent says gone or never-created
// while its sandbox lives (no false gone), and nothing that is not ours is
// touched (no foreign kill): not a sandbox of our team carrying another
// owner's metadata, nor one of another team carrying our very metadata,
// nor the sandbox of an intent declared under another account.

// e2bcOtherTeam and e2bcOtherKey: another team of the same E2B API, whose
// sandboxes answer 404 to our key, as gone ones do.
const (
	e2bcOtherTeam = "team-crash-other"
	e2bcOtherKey  = "e2b_fedcba9876543210fedcba9876543210fedcba98"
	// e2bcHorizon closes a declared name never seen after this long. Every
	// create of a case has landed or failed before the drains start.
	e2bcHorizon = "2s"
)

type e2bcWorld struct {
	t       *testing.T
	srv     *e2btest.Server
	p       *e2b.Provider // our account
	other   *e2b.Provider // another team's
	journal string
	owner   string
	// untouchable: sandboxes that are not ours to end, with the state they
	// must keep.
	untouchable map[string]string
	// elsewhere: intents declared under the other account; they must stay
	// live, their sandbox untouched.
	elsewhere map[string]bool
}

func newE2BCWorld(t *testing.T) *e2bcWorld {
	t.Helper()
	srv, _ := testutil.E2B(t)
	srv.AddTeam(e2btest.DefaultTeam, e2btest.Limits{MaxLengthHours: 1, Concurrency: 1000})
	srv.AddTeam(e2bcOtherTeam, e2btest.Limits{MaxLengthHours: 1, Concurrency: 1000})
	srv.AddKey(e2bcOtherKey, e2bcOtherTeam)
	w := &e2bcWorld{t: t, srv: srv, journal: filepath.Join(t.TempDir(), "journal.db"),
		untouchable: map[string]string{}, elsewhere: map[string]bool{}}
	w.p, w.other = w.provider(e2btest.DefaultKey), w.provider(e2bcOtherKey)
	j := w.open()
	w.owner = j.Owner()
	j.Close()
	// Same team, tether's keys, another owner: foreign.
	w.plant(e2btest.DefaultTeam, map[string]string{intent.LabelOwner: "someone-else", intent.LabelIntent: newIntentID(), e2b.MetadataName: "tether-x"})
	// Same team, our owner, an intent this journal never had.
	w.plant(e2btest.DefaultTeam, map[string]string{intent.LabelOwner: w.owner, intent.LabelIntent: newIntentID(), e2b.MetadataName: "tether-y"})
	return w
}

func (w *e2bcWorld) provider(key string) *e2b.Provider {
	w.t.Helper()
	return testutil.E2BProvider(w.t, w.srv, func(c *e2b.Config) { c.APIKey, c.CallTimeout = key, 5*time.Second })
}

func (w *e2bcWorld) open() *journal.Journal {
	w.t.Helper()
	j, err := journal.Open(w.journal, journal.Options{})
	if err != nil {
		w.t.Fatalf("open the journal: %v", err)
	}
	return j
}

func (w *e2bcWorld) plant(team string, md map[string]string) {
	sb := w.srv.AddSandbox(team, e2btest.SeedSandbox{Metadata: md, Timeout: 50 * time.Minute})
	w.untouchable[sb.ID] = sb.State
}

// E2B intents a runner leaves behind.
const (
	e2bcObserved   = "observed"   // created, id reported
	e2bcUnobserved = "unobserved" // created, the answer never seen: found by metadata
	e2bcDeclared   = "declared"   // declared, never created
	e2bcPaused     = "paused"     // auto-pause, its timeout passed: a paused snapshot
	e2bcReleased   = "released"   // killed by the runner itself, released
	e2bcStop       = "stop"       // to be paused by the drain, not killed
	e2bcElsewhere  = "elsewhere"  // declared under another account
)

var e2bcKinds = []string{e2bcObserved, e2bcUnobserved, e2bcDeclared, e2bcPaused, e2bcReleased, e2bcStop, e2bcElsewhere}

// seed plays a runner's part for each kind: declare through the journal,
// create through the E2B API with tether's metadata, report the id (or
// not). A create the faults broke counts as a lost create: the runner
// never saw its id.
func (w *e2bcWorld) seed(kinds ...string) {
	w.t.Helper()
	j := w.open()
	defer j.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	for _, kind := range kinds {
		p, on := w.p, intent.DrainDelete
		switch kind {
		case e2bcElsewhere:
			p = w.other
		case e2bcStop:
			on = intent.DrainStop
		}
		in, _, err := j.Create(ctx, intent.Declaration{Labels: map[string]string{"runner": "e2bcrash"}, Provider: e2b.ProviderName, Account: p.Account(), OnDrain: on})
		if err != nil {
			w.t.Fatalf("declare: %v", err)
		}
		if kind == e2bcElsewhere {
			w.elsewhere[in.ID] = true
		}
		if kind == e2bcDeclared {
			continue
		}
		opts := e2b.CreateOptions{}
		if kind == e2bcPaused {
			opts.AutoPause = true
		}
		sb, err := p.Create(ctx, in.Name, in.Labels, opts)
		if err != nil {
			continue // lost, or never made: the drain finds out which
		}
		if kind == e2bcElsewhere {
			w.untouchable[sb.ID] = e2btest.StateRunning
		}
		if kind == e2bcUnobserved {
			// Another team's sandbox carrying this very metadata: found by
			// nothing of ours, touched by nothing.
			w.plant(e2bcOtherTeam, in.Labels)
			continue
		}
		if in, err = j.Observe(in.ID, sb.ID); err != nil {
			w.t.Fatalf("observe: %v", err)
		}
		switch kind {
		case e2bcPaused:
			w.srv.Expire(sb.ID)
		case e2bcReleased:
			if err := p.Delete(ctx, sb.ID); err == nil {
				if _, err := j.Release(in.ID, ""); err != nil {
					w.t.Fatalf("release: %v", err)
				}
			}
		}
	}
}

// drain runs `tether drain` (with crash points) on the journal, dying at point if it is not
// empty; it returns the exit code and stderr.
func (w *e2bcWorld) drain(point string) (int, string) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitBound)
	defer cancel()
	tetherBin, _ := crashBinaries(w.t)
	cmd := exec.CommandContext(ctx, tetherBin, "drain", "--journal", w.journal, "--drain-timeout", drainTimeout, "--never-created-after", e2bcHorizon)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "E2B_") && !strings.HasPrefix(kv, "DAYTONA_") && !strings.HasPrefix(kv, "TETHER_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, testutil.E2BEnv(w.srv)...)
	if point != "" {
		cmd.Env = append(cmd.Env, crashpoint.Env+"="+point)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		w.t.Fatalf("tether drain did not end within %s; stderr:\n%s", 2*waitBound, stderr.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
	} else if err != nil {
		w.t.Fatalf("tether drain: %v", err)
	}
	return code, stderr.String()
}

// crashAt drains until the crash at point and checks that it came.
func (w *e2bcWorld) crashAt(point string) {
	w.t.Helper()
	code, stderr := w.drain(point)
	name, _, _ := strings.Cut(point, ":")
	if code != 137 || !strings.Contains(stderr, "crashpoint: "+name+" hit") {
		w.t.Fatalf("want a crash at %s (exit 137), got exit %d; stderr:\n%s", point, code, stderr)
	}
}

// finish drains to the end: 0, or 3 when intents declared under the other
// account are left live (they must be).
func (w *e2bcWorld) finish() {
	w.t.Helper()
	code, stderr := w.drain("")
	want := 0
	if len(w.elsewhere) > 0 {
		want = 3
	}
	if code != want {
		w.t.Fatalf("the last drain exited %d, want %d; stderr:\n%s", code, want, stderr)
	}
	w.check(true)
}

// check holds the simulator's record against the journal. final: after
// the last drain, when every intent of ours must have ended.
func (w *e2bcWorld) check(final bool) (ours int) {
	t := w.t
	t.Helper()
	j := w.open()
	all, err := j.All()
	j.Close()
	if err != nil {
		t.Fatalf("read the journal: %v", err)
	}
	recorded := make(map[string]intent.Intent, len(all))
	for _, in := range all {
		recorded[in.ID] = in
	}
	byIntent := map[string][]e2btest.Sandbox{}
	for _, sb := range w.srv.Sandboxes() {
		calls := w.srv.CallsFor(sb.ID)
		want, ok := w.untouchable[sb.ID]
		if !ok && w.elsewhere[sb.Metadata[intent.LabelIntent]] && sb.Team == e2bcOtherTeam {
			// The other account's sandbox of an intent declared under it
			// (its create's answer may have been lost).
			want, ok = e2btest.StateRunning, true
		}
		if ok {
			// No foreign kill: not killed, not paused, never sent a kill.
			if sb.State != want || calls[e2btest.RouteKill] > 0 || calls[e2btest.RoutePause] > 0 {
				t.Errorf("foreign kill: sandbox %s (team %s, %v) is %s (was %s), %d kills and %d pauses sent to it", sb.ID, sb.Team, sb.Metadata, sb.State, want, calls[e2btest.RouteKill], calls[e2btest.RoutePause])
			}
			continue
		}
		if sb.Team != e2btest.DefaultTeam || sb.Metadata[intent.LabelOwner] != w.owner {
			t.Errorf("sandbox %s (team %s, %v) is no one's", sb.ID, sb.Team, sb.Metadata)
			continue
		}
		ours++
		id := sb.Metadata[intent.LabelIntent]
		byIntent[id] = append(byIntent[id], sb)
		in, ok := recorded[id]
		alive := sb.State != e2btest.StateKilled
		switch {
		case !ok:
			t.Errorf("leak: sandbox %s carries intent %s, which the journal does not have", sb.ID, id)
		case in.OnDrain == intent.DrainStop && in.State == intent.Stopped:
			if sb.State != e2btest.StatePaused || !sb.Snapshot {
				t.Errorf("intent %s is stopped, its sandbox %s is %s (snapshot %v): a stop must pause, not kill", id, sb.ID, sb.State, sb.Snapshot)
			}
		case alive && (final || !in.Live()):
			t.Errorf("leak: sandbox %s of intent %s is %s; the journal says %s (%s)", sb.ID, id, sb.State, in.State, in.LastError)
		case !alive && sb.KillReason != e2btest.KillRequest && !sb.Orphaned:
			t.Errorf("sandbox %s of intent %s ended by %s, not by a request", sb.ID, id, sb.KillReason)
		case !alive && final && in.State != intent.Gone && in.State != intent.Released:
			t.Errorf("sandbox %s of intent %s was killed, but the journal never confirmed it: %s (%s)", sb.ID, id, in.State, in.LastError)
		}
	}
	for id, in := range recorded {
		if w.elsewhere[id] {
			if in.State != intent.Pending && in.State != intent.Observed {
				t.Errorf("intent %s, declared under the other account, is %s (%s): only its own account may end it", id, in.State, in.LastError)
			}
			continue
		}
		switch in.State {
		case intent.Gone, intent.NeverCreated:
			// No false gone: nothing of it lives.
			for _, sb := range byIntent[id] {
				if sb.State != e2btest.StateKilled {
					t.Errorf("false %s: intent %s, but its sandbox %s is %s", in.State, id, sb.ID, sb.State)
				}
			}
		case intent.Foreign:
			t.Errorf("intent %s closed foreign (%s): every sandbox of this world carries its intent's metadata", id, in.LastError)
		}
		if final && in.Live() {
			t.Errorf("intent %s (%s) is still live after the last drain: %s, %s", id, in.Name, in.State, in.LastError)
		}
	}
	return ours
}

// The drain's crash points, each at several events of a drain of the
// seeded journal (one lost create: one lookup).
func e2bcPoints() []string {
	return []string{
		crashpoint.ReaperAfterLookup + ":1",
		crashpoint.ReaperBeforeDelete + ":1", crashpoint.ReaperBeforeDelete + ":3",
		crashpoint.ReaperAfterDelete + ":1", crashpoint.ReaperAfterDelete + ":3",
		crashpoint.DrainResolved + ":1", crashpoint.DrainResolved + ":4",
	}
}

func TestE2BCrashPoints(t *testing.T) {
	t.Parallel()
	crashBinaries(t)
	for _, point := range e2bcPoints() {
		t.Run(strings.ReplaceAll(point, ":", "@"), func(t *testing.T) {
			t.Parallel()
			w := newE2BCWorld(t)
			w.seed(e2bcKinds...)
			w.seed(e2bcObserved, e2bcObserved)
			w.crashAt(point)
			w.check(false)
			w.finish()
			t.Logf("%s: %d sandboxes of ours, all resolved, %d untouched", point, len(w.srv.Sandboxes())-len(w.untouchable), len(w.untouchable))
		})
	}
}

// drawE2BFaults draws one cycle's E2B faults: latency, 5xx, 429 with
// Retry-After, lost create answers, kills that fail on the node.
func drawE2BFaults(rng *rand.Rand) e2btest.Faults {
	pick := func(rates ...float64) float64 { return rates[rng.IntN(len(rates))] }
	return e2btest.Faults{
		Seed:           rng.Int64(),
		Latency:        time.Duration(pick(0, 0, 2, 10)) * time.Millisecond,
		Rate5xx:        pick(0, 0.05, 0.15),
		Rate429:        pick(0, 0, 0.05),
		RateCreateLost: pick(0, 0.2),
		RateKillFail:   pick(0, 0.1),
	}
}

// The seeded E2B soak: one journal, one simulated E2B API, many cycles.
// Each cycle seeds a random set of intents under random faults (latency,
// 5xx, 429 with Retry-After, lost create answers, kills that fail on the
// node), drains them with a random crash point (or none), and checks the
// record; the next cycle drains the same journal again. A last drain
// without faults or crashes must leave nothing of ours.
//
//	TETHER_E2B_SOAK=100 TETHER_SOAK_SEED=7 go test ./test -run TestE2BCrashSoak -v
func TestE2BCrashSoak(t *testing.T) {
	t.Parallel()
	cycles := 6
	if v := os.Getenv("TETHER_E2B_SOAK"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("TETHER_E2B_SOAK=%q: want a number of cycles", v)
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
	}
	t.Logf("E2B soak: %d cycles, seed %d", cycles, seed)
	crashBinaries(t)
	w := newE2BCWorld(t)
	rng := rand.New(rand.NewPCG(seed, seed^0xe2b))
	crashes := 0
	for cycle := 1; cycle <= cycles; cycle++ {
		var kinds []string
		for range 1 + rng.IntN(6) {
			kinds = append(kinds, e2bcKinds[rng.IntN(len(e2bcKinds))])
		}
		faults := drawE2BFaults(rng)
		point := ""
		if rng.IntN(5) > 0 {
			ps := e2bcPoints()
			name, _, _ := strings.Cut(ps[rng.IntN(len(ps))], ":")
			point = name + ":" + strconv.Itoa(1+rng.IntN(3))
		}
		t.Logf("cycle %d: %v; crash %q; faults %s", cycle, kinds, point, faults)
		w.srv.SetFaults(faults)
		w.seed(kinds...)
		code, stderr := w.drain(point)
		name, _, _ := strings.Cut(point, ":")
		switch {
		case point != "" && strings.Contains(stderr, "crashpoint: "+name+" hit"):
			crashes++
			if code != 137 {
				t.Fatalf("crashed at %s but exited %d", point, code)
			}
		case code != 0 && code != 3:
			// 3: intents left live (the other account's, or faults that
			// outlasted the deadline), each reported.
			t.Fatalf("cycle %d: tether drain exited %d; stderr:\n%s", cycle, code, stderr)
		}
		w.srv.SetFaults(e2btest.Faults{})
		w.check(false)
		if t.Failed() {
			t.Fatalf("soak failed in cycle %d; replay with TETHER_E2B_SOAK=%d %s=%d", cycle, cycles, envSoakSeed, seed)
		}
	}
	w.finish()
	t.Logf("E2B soak: seed %d, %d cycles, %d crashes, %d sandboxes of ours, %d untouched, outcome %s",
		seed, cycles, crashes, len(w.srv.Sandboxes())-len(w.untouchable), len(w.untouchable), map[bool]string{false: "pass", true: "FAIL"}[t.Failed()])
}
