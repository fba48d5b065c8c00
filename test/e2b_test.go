package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/intentapi"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/provider/e2b"
	"github.com/tether-run/tether/provider/e2b/e2btest"
)

// E2B end to end: the real tether binary against the simulated E2B API
// (provider/e2b/e2btest), judged by the simulator's record of every
// sandbox's fate. The zero-code runner (test/e2brunner) knows only
// E2B_API_URL and E2B_API_KEY (and Daytona's, for a runner of both clouds).

const otherE2BTeam = "team-other"

// e2bRunner is the zero-code E2B runner, built once per go test run beside
// tether (testutil.Build: in the go command's work directory, removed with
// it).
func e2bRunner(t *testing.T) string {
	t.Helper()
	return testutil.Build(t, testutil.Module+"/test/e2brunner")
}

// e2bWorld is a world with a simulated E2B API beside its Daytona, and
// neighbours planted in it that must never be touched: a sandbox of our
// team carrying another owner's metadata, one carrying our owner but
// another intent, and one of another team carrying ours.
type e2bWorld struct {
	*world
	e2b        *e2btest.Server
	neighbours []string
}

func newE2BWorld(t *testing.T, opts ...e2btest.Option) *e2bWorld {
	t.Helper()
	w := &e2bWorld{world: newWorld(t)}
	w.e2b, _ = testutil.E2B(t, opts...)
	w.e2b.AddTeam(otherE2BTeam, e2btest.Limits{MaxLengthHours: 1, Concurrency: 20})
	w.env = append(w.env, testutil.E2BEnv(w.e2b)...)
	for _, seed := range []struct {
		team string
		md   map[string]string
	}{
		{e2btest.DefaultTeam, map[string]string{intent.LabelOwner: "someone-else", intent.LabelIntent: newIntentID(), e2b.MetadataName: "tether-x"}},
		{e2btest.DefaultTeam, map[string]string{intent.LabelOwner: w.owner, intent.LabelIntent: newIntentID(), e2b.MetadataName: "tether-y"}},
		{otherE2BTeam, map[string]string{intent.LabelOwner: w.owner, intent.LabelIntent: newIntentID(), e2b.MetadataName: "tether-z"}},
	} {
		sb := w.e2b.AddSandbox(seed.team, e2btest.SeedSandbox{Metadata: seed.md, Timeout: 50 * time.Minute})
		w.neighbours = append(w.neighbours, sb.ID)
	}
	t.Cleanup(func() {
		for _, id := range w.neighbours {
			if sb, _ := w.e2b.Sandbox(id); sb.State != e2btest.StateRunning {
				t.Errorf("neighbour %s (team %s, metadata %v) was touched: %s", id, sb.Team, sb.Metadata, sb.State)
			}
		}
	})
	return w
}

// runE2B starts `tether run --e2b-max-timeout 10m [flags] -- e2brunner actions...`.
func (w *e2bWorld) runE2B(flags []string, actions ...string) *proc {
	args := append(append(w.tetherArgs("run"), "--drain-timeout", drainTimeout, "--e2b-max-timeout", "10m"), flags...)
	args = append(args, "--", e2bRunner(w.t))
	return w.start(append(args, actions...)...)
}

// assertKilled checks the simulator's record: each sandbox was killed by
// a DELETE (not by its timeout, not left running).
func (w *e2bWorld) assertKilled(ids ...string) {
	w.t.Helper()
	for _, id := range ids {
		sb, ok := w.e2b.Sandbox(id)
		if !ok || sb.State != e2btest.StateKilled || sb.KillReason != e2btest.KillRequest {
			w.t.Errorf("sandbox %s: %+v, want killed by request", id, sb)
		}
	}
}

// TestE2BZeroCodeRunnerKilled: an unchanged runner creates 5 sandboxes
// through tether's E2B proxy, kills one itself, creates 2 asking for 50
// minutes, and is SIGKILLed. The drain kills every other sandbox; the
// long ones were capped to --e2b-max-timeout at create; each carries
// tether's metadata beside the runner's.
func TestE2BZeroCodeRunnerKilled(t *testing.T) {
	t.Parallel()
	w := newE2BWorld(t)
	p := w.runE2B(nil, "url", "e2b:5", "kill:1", "timeout:3000", "e2b:2")
	out := p.ready()
	if u := out.of("url"); len(u) != 1 || !strings.HasPrefix(u[0].name, "http://127.0.0.1:") {
		t.Fatalf("the runner's E2B_API_URL is %+v, want tether's proxy on loopback", u)
	}
	created := ids(out.of("created"), sandboxOf)
	if len(created) != 7 {
		t.Fatalf("runner created %d: %+v", len(created), out.lines)
	}
	for i, id := range created {
		sb, _ := w.e2b.Sandbox(id)
		if sb.Metadata[intent.LabelOwner] != w.owner || sb.Metadata["runner"] != "zero-code" || sb.Metadata["e2e"] != "yes" || !strings.HasPrefix(sb.Metadata[e2b.MetadataName], intent.NamePrefix) {
			t.Errorf("sandbox %s metadata %v: want tether's owner, scope and name beside the runner's", id, sb.Metadata)
		}
		if life := sb.EndAt.Sub(sb.StartedAt); i >= 5 && life > 10*time.Minute {
			t.Errorf("sandbox %s asked for 50m: lives %s, want capped to 10m", id, life)
		}
	}
	if err := syscall.Kill(out.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(); code != 128+int(syscall.SIGKILL) {
		t.Fatalf("tether exit %d, want the child's 137; stderr:\n%s", code, p.stderr)
	}
	w.assertKilled(created...)
	rep := mustReport(t, p.stderr.String())
	if rep.left != 0 || rep.counts["gone"] != 7 {
		t.Fatalf("report %+v, want 7 gone, none left", rep)
	}
	// The proxy vouches for what it created and E2B kills before it
	// answers: each drained sandbox costs one kill and one read (the 404),
	// the one the runner killed two reads (a 404 read twice).
	calls := w.e2b.Calls()
	if calls[e2btest.RouteKill] != 7 || calls[e2btest.RouteGet] > 6+2 {
		t.Errorf("%d kills and %d reads for 7 sandboxes (one killed by the runner), want 7 and at most 8", calls[e2btest.RouteKill], calls[e2btest.RouteGet])
	}
}

// TestE2BBothClouds: one runner creates sandboxes in E2B and in Daytona,
// both through tether's proxies, and is SIGKILLed: one drain of one run
// kills the E2B ones and destroys the Daytona ones.
func TestE2BBothClouds(t *testing.T) {
	t.Parallel()
	w := newE2BWorld(t)
	p := w.runE2B([]string{"--daytona-proxy=true"}, "e2b:3", "daytona:3")
	out := p.ready()
	var inE2B, inDaytona []string
	for _, l := range out.of("created") {
		if l.name == "e2b" {
			inE2B = append(inE2B, l.sandbox)
		} else {
			inDaytona = append(inDaytona, l.sandbox)
		}
	}
	if len(inE2B) != 3 || len(inDaytona) != 3 {
		t.Fatalf("runner: %+v", out.lines)
	}
	if err := syscall.Kill(out.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.wait()
	w.assertKilled(inE2B...)
	w.assertDestroyed(inDaytona...)
	if rep := mustReport(t, p.stderr.String()); rep.total != 6 || rep.counts["gone"] != 6 {
		t.Fatalf("report %+v, want one drain of 6 intents, all gone", rep)
	}
}

// TestE2BTetherKilledThenDrained: tether itself is SIGKILLed while the
// runner holds 3 E2B sandboxes; `tether drain` on the same journal kills
// them.
func TestE2BTetherKilledThenDrained(t *testing.T) {
	t.Parallel()
	w := newE2BWorld(t)
	p := w.runE2B(nil, "e2b:3")
	out := p.ready()
	created := ids(out.of("created"), sandboxOf)
	if code := p.stop(syscall.SIGKILL); code != 128+int(syscall.SIGKILL) {
		t.Fatalf("tether exit %d", code)
	}
	syscall.Kill(out.pid, syscall.SIGKILL)
	for _, id := range created {
		if sb, _ := w.e2b.Sandbox(id); sb.State != e2btest.StateRunning {
			t.Fatalf("sandbox %s %s before the drain", id, sb.State)
		}
	}
	code, stderr := w.runTether(append(w.tetherArgs("drain"), "--drain-timeout", drainTimeout)...)
	if code != 0 {
		t.Fatalf("tether drain exit %d:\n%s", code, stderr)
	}
	w.assertKilled(created...)
}

// TestE2BLostCreate: E2B makes the sandbox but its answer is lost, so
// neither the runner nor tether learns its id. The drain finds it by
// tether's metadata and kills it.
func TestE2BLostCreate(t *testing.T) {
	t.Parallel()
	w := newE2BWorld(t, e2btest.WithFaults(e2btest.Faults{RateCreateLost: 1, Routes: []string{e2btest.RouteCreate}}))
	p := w.runE2B(nil, "e2b:1")
	if code := p.wait(); code != 1 {
		t.Fatalf("tether exit %d, want the runner's 1 (its create failed); stderr:\n%s", code, p.stderr)
	}
	var lost []string
	for _, sb := range w.e2b.Sandboxes() {
		if sb.Lost {
			lost = append(lost, sb.ID)
		}
	}
	if len(lost) != 1 {
		t.Fatalf("%d lost creates in the record, want 1", len(lost))
	}
	w.assertKilled(lost...)
}

// TestE2BSocketIntent: a runner declares an E2B intent over the socket
// (provider "e2b"), creates the sandbox itself with a 50-minute timeout
// and observes it: tether caps the timeout; on SIGTERM the drain kills
// it. A declaration naming a provider tether has no credentials for is
// refused.
func TestE2BSocketIntent(t *testing.T) {
	t.Parallel()
	w := newE2BWorld(t)
	args := append(w.tetherArgs("run"), "--drain-timeout", drainTimeout, "--e2b-max-timeout", "10m", "--", "sleep", "600")
	p := w.start(args...)
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	c := w.client()
	var in intentapi.Intent
	testutil.Eventually(t, "an E2B intent declared over the socket", func() (bool, string) {
		var err error
		in, err = c.CreateIntent(ctx, intentapi.CreateRequest{Provider: e2b.ProviderName})
		return err == nil, fmt.Sprint(err)
	})
	if in.Provider != e2b.ProviderName {
		t.Fatalf("declare: %+v", in)
	}
	if _, err := c.CreateIntent(ctx, intentapi.CreateRequest{Provider: "nosuch"}); err == nil {
		t.Fatal("a provider tether has no credentials for was accepted")
	}
	prov := testutil.E2BProvider(t, w.e2b)
	sb, err := prov.Create(ctx, in.Name, in.Labels, e2b.CreateOptions{Timeout: 50 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Observe(ctx, in.ID, sb.ID); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the timeout of "+sb.ID+" capped", func() (bool, string) {
		rec, _ := w.e2b.Sandbox(sb.ID)
		return time.Until(rec.EndAt) <= 10*time.Minute, "ends " + rec.EndAt.String()
	})
	// An intent observed with a sandbox that is not its own (another
	// sandbox of the team): its timeout is never touched, it is never
	// killed.
	in2, err := c.CreateIntent(ctx, intentapi.CreateRequest{Provider: e2b.ProviderName})
	if err != nil {
		t.Fatal(err)
	}
	stranger := w.e2b.AddSandbox(e2btest.DefaultTeam, e2btest.SeedSandbox{Timeout: 50 * time.Minute, Metadata: map[string]string{"app": "theirs"}})
	if _, err := c.Observe(ctx, in2.ID, stranger.ID); err != nil {
		t.Fatal(err)
	}
	p.stop(syscall.SIGTERM)
	w.assertKilled(sb.ID)
	if rec, _ := w.e2b.Sandbox(stranger.ID); rec.State != e2btest.StateRunning || !rec.EndAt.Equal(stranger.EndAt) {
		t.Errorf("a sandbox not ours was touched: %+v (planted ending %s)", rec, stranger.EndAt)
	}
}

// TestE2BRenewedThenHostLost: with --e2b-max-timeout 15s, a sandbox that
// asked for 2 minutes is cut to 15 s and renewed while the runner lives
// (still running after 20 s); then tether and its runner die at once, as
// with their host, and E2B's own timeout ends the sandbox within the cap.
func TestE2BRenewedThenHostLost(t *testing.T) {
	t.Parallel()
	const max = 15 * time.Second
	// The simulator follows the wall clock while tether lives, then jumps
	// past the cap once the host is lost (skip).
	var skip atomic.Int64
	w := newE2BWorld(t, e2btest.WithClock(func() time.Time { return time.Now().Add(time.Duration(skip.Load())) }))
	args := append(w.tetherArgs("run"), "--drain-timeout", drainTimeout, "--e2b-max-timeout", max.String(), "--", e2bRunner(t), "timeout:120", "e2b:1")
	p := w.start(args...)
	out := p.ready()
	id := ids(out.of("created"), sandboxOf)[0]
	// Real time, on purpose: the scenario is a runner at work past one
	// whole cap, and what keeps its sandbox alive is the real tether's
	// renewals, timed by the wall clock in that process, against a
	// timeout the simulator counts on the same clock. Neither can be sped
	// up from here without the renewals racing a faster timeout.
	time.Sleep(max + 5*time.Second)
	sb, _ := w.e2b.Sandbox(id)
	if sb.State != e2btest.StateRunning || time.Until(sb.EndAt) > max {
		t.Fatalf("after %s under a live runner: %s, ends in %s; want running, renewed within the cap", max+5*time.Second, sb.State, time.Until(sb.EndAt))
	}
	lost := time.Now()
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(out.pid, syscall.SIGKILL)
	p.wait() // no renewal of tether's can land after the jump
	// With nobody left to renew it, the sandbox's timeout, at most the cap
	// from the host loss, passes on the simulator's clock.
	skip.Store(int64(max + time.Second))
	testutil.Eventually(t, "the sandbox ended after the host loss", func() (bool, string) {
		sb, _ = w.e2b.Sandbox(id)
		return sb.State == e2btest.StateKilled, sb.State
	})
	if sb.KillReason != e2btest.KillTimeout || sb.KilledAt.Sub(lost) > max {
		t.Fatalf("sandbox ended %s after the host loss (%s), want by its timeout within %s", sb.KilledAt.Sub(lost), sb.KillReason, max)
	}
}

// TestE2BTetherKilledThenReplayed: tether is SIGKILLed while its runner
// holds 3 E2B sandboxes; the next `tether run` on the same journal
// replays them at boot, while its own runner still runs.
func TestE2BTetherKilledThenReplayed(t *testing.T) {
	t.Parallel()
	w := newE2BWorld(t)
	p := w.runE2B(nil, "e2b:3")
	out := p.ready()
	created := ids(out.of("created"), sandboxOf)
	p.stop(syscall.SIGKILL)
	syscall.Kill(out.pid, syscall.SIGKILL)
	next := w.runE2B(nil)
	next.ready()
	testutil.Eventually(t, "the boot replay's kills", func() (bool, string) {
		n := 0
		for _, id := range created {
			if sb, _ := w.e2b.Sandbox(id); sb.State == e2btest.StateKilled {
				n++
			}
		}
		return n == len(created), fmt.Sprintf("%d of %d killed", n, len(created))
	})
	w.assertKilled(created...)
	next.stop(syscall.SIGTERM)
}

// TestE2BSweep: `tether sweep --provider e2b --yes` reads the E2B team, not
// a journal. tether cannot label an E2B sandbox kept, so without
// --include-unmarkable nothing is stale; with it, a paused sandbox
// carrying a tether-owner, idle for longer than --idle-for, is killed (its
// snapshot with it); a running one (E2B reports no activity) and one
// without tether-owner are left alone, as are the neighbours of another
// owner and another team.
func TestE2BSweep(t *testing.T) {
	t.Parallel()
	// Planted a minute ago, on the simulator's clock: older and idle for
	// longer than the sweep's bounds without waiting for it.
	var ago atomic.Int64
	ago.Store(int64(time.Minute))
	w := newE2BWorld(t, e2btest.WithClock(func() time.Time { return time.Now().Add(-time.Duration(ago.Load())) }))
	owner := w.e2b.AddSandbox(e2btest.DefaultTeam, e2btest.SeedSandbox{Paused: true,
		Metadata: map[string]string{intent.LabelOwner: "a-dead-run", intent.LabelIntent: newIntentID(), e2b.MetadataName: "tether-old"}})
	running := w.e2b.AddSandbox(e2btest.DefaultTeam, e2btest.SeedSandbox{Timeout: 50 * time.Minute,
		Metadata: map[string]string{intent.LabelOwner: "a-dead-run", intent.LabelIntent: newIntentID(), e2b.MetadataName: "tether-run"}})
	noOwner := w.e2b.AddSandbox(e2btest.DefaultTeam, e2btest.SeedSandbox{Paused: true, Metadata: map[string]string{"app": "x"}})
	ago.Store(0)
	sweep := []string{"sweep", "--provider", "e2b", "--yes", "--owner", "a-dead-run", "--older-than", "10ms", "--idle-for", "10ms", "--e2b-restore-window", "100ms"}
	if code, stderr := w.runTether(sweep...); code != 0 {
		t.Fatalf("sweep exit %d:\n%s", code, stderr)
	}
	if sb, _ := w.e2b.Sandbox(owner.ID); sb.State != e2btest.StatePaused {
		t.Fatalf("without --include-unmarkable the paused sandbox is %s, want left paused", sb.State)
	}
	code, stderr := w.runTether(append(sweep, "--include-unmarkable")...)
	if code != 0 {
		t.Fatalf("sweep exit %d:\n%s", code, stderr)
	}
	if sb, _ := w.e2b.Sandbox(owner.ID); sb.State != e2btest.StateKilled || sb.Snapshot {
		t.Errorf("the stale paused sandbox: %+v", sb)
	}
	for _, id := range []string{running.ID, noOwner.ID} {
		if sb, _ := w.e2b.Sandbox(id); sb.State == e2btest.StateKilled {
			t.Errorf("sandbox %s (%v) was killed", id, sb.Metadata)
		}
	}
}

// TestE2BOnly: with E2B credentials and none for Daytona, --require-provider
// is satisfied, and a runner's E2B sandboxes are drained.
func TestE2BOnly(t *testing.T) {
	t.Parallel()
	w := newE2BWorld(t)
	env := w.env[:0:0]
	for _, kv := range w.env {
		if !strings.HasPrefix(kv, "DAYTONA_") {
			env = append(env, kv)
		}
	}
	w.env = env
	p := w.runE2B([]string{"--require-provider"}, "e2b:2", "exit")
	out := p.ready()
	if code := p.wait(); code != 0 {
		t.Fatalf("tether exit %d; stderr:\n%s", code, p.stderr)
	}
	w.assertKilled(ids(out.of("created"), sandboxOf)...)
}

// TestE2BForksDrained: an unchanged runner forks two of its sandboxes
// (each fork carries its parent's metadata) and is SIGKILLed: the drain
// kills parents and forks alike.
func TestE2BForksDrained(t *testing.T) {
	t.Parallel()
	w := newE2BWorld(t)
	p := w.runE2B(nil, "e2b:3", "fork:2")
	out := p.ready()
	all := ids(out.of("created", "forked"), sandboxOf)
	if len(all) != 5 {
		t.Fatalf("runner: %+v", out.lines)
	}
	syscall.Kill(out.pid, syscall.SIGKILL)
	p.wait()
	w.assertKilled(all...)
	if rep := mustReport(t, p.stderr.String()); rep.total != 5 || rep.counts["gone"] != 5 {
		t.Fatalf("report %+v, want 5 intents (2 of them forks), all gone", rep)
	}
}

// forksInRecord is the simulator's record of every fork of parent: those
// the runner heard of and those it did not.
func (w *e2bWorld) forksInRecord(parent string) []string {
	var out []string
	for _, sb := range w.e2b.Sandboxes() {
		if sb.ForkOf == parent {
			out = append(out, sb.ID)
		}
	}
	return out
}

// TestE2BForkCountDrained: an unchanged runner forks one of its sandboxes
// with count 3 and is SIGKILLed: by the simulator's record every fork is
// killed by a request, the parent and the other sandbox too, and the
// neighbours are untouched (newE2BWorld). The report has one intent per
// fork.
func TestE2BForkCountDrained(t *testing.T) {
	t.Parallel()
	w := newE2BWorld(t)
	p := w.runE2B(nil, "e2b:2", "forks:3")
	out := p.ready()
	created, forked := ids(out.of("created"), sandboxOf), ids(out.of("forked"), sandboxOf)
	if len(created) != 2 || len(forked) != 3 {
		t.Fatalf("runner: %+v", out.lines)
	}
	syscall.Kill(out.pid, syscall.SIGKILL)
	p.wait()
	if rec := w.forksInRecord(created[0]); len(rec) != 3 {
		t.Fatalf("the simulator holds %d forks of %s, want 3", len(rec), created[0])
	}
	w.assertKilled(append(created, w.forksInRecord(created[0])...)...)
	if rep := mustReport(t, p.stderr.String()); rep.total != 5 || rep.counts["gone"] != 5 {
		t.Fatalf("report %+v, want 5 intents (3 of them forks), all gone", rep)
	}
}

// TestE2BLostForkDrained: the answer of a fork of count 3 is lost (E2B
// started the forks; the runner's connection is reset), so no fork's id is
// journaled. Each of the 3 intents finds a fork of its own by the parent's
// metadata, which the forks carry, and no other intent holds: all 3 and
// the parent are killed by exactly one request each (no intent took
// another's sandbox), every intent gone, nothing foreign touched.
func TestE2BLostForkDrained(t *testing.T) {
	t.Parallel()
	w := newE2BWorld(t, e2btest.WithFaults(e2btest.Faults{RateForkLost: 1, Routes: []string{e2btest.RouteFork}}))
	p := w.runE2B(nil, "e2b:1", "forks:3")
	out := p.ready()
	created := ids(out.of("created"), sandboxOf)
	if len(created) != 1 || len(out.of("fork-lost")) != 1 || len(out.of("forked")) != 0 {
		t.Fatalf("runner: %+v", out.lines)
	}
	rec := w.forksInRecord(created[0])
	if len(rec) != 3 {
		t.Fatalf("the simulator holds %d forks of %s, want 3", len(rec), created[0])
	}
	syscall.Kill(out.pid, syscall.SIGKILL)
	p.wait()
	w.assertKilled(append(created, rec...)...)
	for _, id := range append(created, rec...) {
		if n := w.e2b.CallsFor(id)[e2btest.RouteKill]; n != 1 {
			t.Errorf("sandbox %s: %d kills, want 1", id, n)
		}
	}
	if rep := mustReport(t, p.stderr.String()); rep.total != 4 || rep.counts["gone"] != 4 {
		t.Fatalf("report %+v, want 4 intents, all gone", rep)
	}
}
