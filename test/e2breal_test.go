package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/intentapi"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
	"github.com/tether-run/tether/provider/e2b"
	"github.com/tether-run/tether/provider/e2b/e2btest"
)

// E2B as its real server behaves (issue 30), end to end: the real tether
// binary, the zero-code runner, and the simulator's record of every
// sandbox's fate as the judge.

// rawKill is a runner's DELETE /sandboxes/{id} at the E2B API URL it was
// given (tether's proxy), with the default key.
func rawKill(apiURL, id string) (int, error) {
	return testutil.E2BCall(http.MethodDelete, apiURL, "/sandboxes/"+id, "")
}

// kills is how many DELETEs reached the simulator for sandbox id.
func (w *e2bWorld) kills(id string) int { return w.e2b.CallsFor(id)[e2btest.RouteKill] }

// killedOnce: each sandbox was killed by a request, with one DELETE.
func (w *e2bWorld) killedOnce(ids ...string) {
	w.t.Helper()
	w.assertKilled(ids...)
	for _, id := range ids {
		if n := w.kills(id); n != 1 {
			w.t.Errorf("sandbox %s: %d DELETEs, want one", id, n)
		}
	}
}

// TestE2BSnapshottedThenTetherKilled: under a 10 min cap a runner pauses
// and resumes one sandbox, and forks another (the parent is checkpointed);
// tether is kill -9'd with its runner, and the simulator's clock passes
// the cap. E2B's timeout kills both, but neither its snapshot: they read
// paused, and persist (evict.go:151-166 never deletes a snapshot). The next
// `tether drain` on the journal kills each (one DELETE each); with the
// journal lost, `tether sweep --include-unmarkable` does (a plain sweep
// cannot tell them from sandboxes handed back as kept, and leaves them).
// The fork itself, never snapshotted, is simply gone.
func TestE2BSnapshottedThenTetherKilled(t *testing.T) {
	for _, next := range []string{"drain", "sweep"} {
		t.Run(next, func(t *testing.T) {
			t.Parallel()
			var skip atomic.Int64
			w := newE2BWorld(t, e2btest.WithClock(func() time.Time { return time.Now().Add(time.Duration(skip.Load())) }))
			p := w.runE2B(nil, "timeout:3000", "e2b:2", "fork:1", "pause:1", "resume:1")
			out := p.ready()
			created, forked := ids(out.of("created"), sandboxOf), ids(out.of("forked"), sandboxOf)
			if len(created) != 2 || len(forked) != 1 {
				t.Fatalf("runner: %+v", out.lines)
			}
			parent, resumed, fork := created[0], created[1], forked[0]
			p.stop(syscall.SIGKILL)
			syscall.Kill(out.pid, syscall.SIGKILL)
			skip.Store(int64(10*time.Minute + time.Second))
			for _, id := range []string{parent, resumed} {
				if sb, _ := w.e2b.Sandbox(id); sb.State != e2btest.StatePaused || sb.Evictions != 1 {
					t.Fatalf("sandbox %s past the cap: %+v; want killed by its timeout and paused from its snapshot", id, sb)
				}
			}
			if sb, _ := w.e2b.Sandbox(fork); sb.State != e2btest.StateKilled || sb.KillReason != e2btest.KillTimeout {
				t.Fatalf("the fork past the cap: %+v; want ended by its timeout", sb)
			}
			switch next {
			case "drain":
				code, stderr := w.runTether(append(w.tetherArgs("drain"), "--drain-timeout", drainTimeout, "--e2b-restore-window", "500ms")...)
				if code != 0 {
					t.Fatalf("tether drain exit %d:\n%s", code, stderr)
				}
				if rep := mustReport(t, stderr); rep.counts["gone"] != 3 || rep.left != 0 {
					t.Errorf("drain report %+v, want 3 gone", rep)
				}
			case "sweep":
				sweep := []string{"sweep", "--provider", "e2b", "--yes", "--owner", w.owner, "--older-than", "1ms", "--idle-for", "1ms", "--e2b-restore-window", "500ms"}
				if code, stderr := w.runTether(sweep...); code != 0 {
					t.Fatalf("tether sweep exit %d:\n%s", code, stderr)
				}
				for _, id := range []string{parent, resumed} {
					if w.kills(id) != 0 {
						t.Fatalf("a sweep without --include-unmarkable killed %s", id)
					}
				}
				if code, stderr := w.runTether(append(sweep, "--include-unmarkable")...); code != 0 {
					t.Fatalf("tether sweep --include-unmarkable exit %d:\n%s", code, stderr)
				}
			}
			w.killedOnce(parent, resumed)
			if n := w.kills(fork); n != 0 {
				t.Errorf("the fork, gone by its timeout, got %d DELETEs", n)
			}
		})
	}
}

// TestE2BRunnerShortensItsTimeout: with a 15 s cap, a runner asks for 2
// minutes (cut to 15 s, renewed every quarter of it) and then sets its
// sandbox's timeout to 8 s (POST /timeout may shorten,
// handlers/sandbox_timeout.go:52). The runner's 8 s stand: no renewal goes
// past them, and E2B's timeout ends the sandbox then.
func TestE2BRunnerShortensItsTimeout(t *testing.T) {
	t.Parallel()
	w := newE2BWorld(t)
	args := append(w.tetherArgs("run"), "--drain-timeout", drainTimeout, "--e2b-max-timeout", "15s", "--", e2bRunner(t), "timeout:120", "e2b:1", "settimeout:8")
	p := w.start(args...)
	out := p.ready()
	set := time.Now()
	id := ids(out.of("created"), sandboxOf)[0]
	testutil.Eventually(t, "the sandbox ended by its timeout", func() (bool, string) {
		sb, _ := w.e2b.Sandbox(id)
		return sb.State == e2btest.StateKilled, sb.State
	})
	sb, _ := w.e2b.Sandbox(id)
	if sb.KillReason != e2btest.KillTimeout || sb.KilledAt.Sub(set) > 8*time.Second+time.Second {
		t.Errorf("ended %s after the runner set 8 s (%s), want by its timeout then", sb.KilledAt.Sub(set), sb.KillReason)
	}
	if n := w.e2b.CallsFor(id)[e2btest.RouteTimeout]; n != 1 {
		t.Errorf("%d timeout calls, want the runner's alone: a renewal went past its 8 s", n)
	}
	p.stop(syscall.SIGTERM)
}

// TestE2BForksOfAForeignParent: a runner forks, twice, a sandbox tether
// does not own (a workspace of its team), and exits. Each fork is a new
// sandbox it made: both are journaled and killed. The parent is untouched:
// no DELETE, no timeout set, its end unchanged.
func TestE2BForksOfAForeignParent(t *testing.T) {
	t.Parallel()
	w := newE2BWorld(t)
	parent := w.e2b.AddSandbox(e2btest.DefaultTeam, e2btest.SeedSandbox{Metadata: map[string]string{"app": "workspace"}, Timeout: 50 * time.Minute})
	p := w.runE2B(nil, "forkother:"+parent.ID, "forkother:"+parent.ID, "exit")
	out := p.ready()
	forks := ids(out.of("forked"), sandboxOf)
	if len(forks) != 2 {
		t.Fatalf("runner: %+v", out.lines)
	}
	if code := p.wait(); code != 0 {
		t.Fatalf("tether exit %d:\n%s", code, p.stderr)
	}
	w.killedOnce(forks...)
	if rep := mustReport(t, p.stderr.String()); rep.counts["gone"] != 2 || rep.left != 0 {
		t.Errorf("report %+v, want both forks gone", rep)
	}
	sb, _ := w.e2b.Sandbox(parent.ID)
	calls := w.e2b.CallsFor(parent.ID)
	if sb.State != e2btest.StateRunning || !sb.EndAt.Equal(parent.EndAt) || calls[e2btest.RouteKill] != 0 || calls[e2btest.RouteTimeout] != 0 {
		t.Errorf("the parent: %+v, calls %v; want running, its end unchanged, no kill, no timeout", sb, calls)
	}
}

// TestE2BResumeRace: the kill/resume race (infra#3636) on. A runner pauses
// its sandbox, sends a resume that takes 2 s to restore, and dies. Whether
// tether's drain kills it (it reads paused: its snapshot is still there)
// or the runner's own DELETE did (through the proxy, while the resume was
// under way: the runner's own process has no say in the order two of its
// calls reach E2B, so the test sends that DELETE once the restore is under
// way), E2B answers 204 and then 404 while the restore runs, and the
// sandbox runs again. tether reports nothing gone meanwhile: it reads
// again once its restore window has passed, finds the sandbox running and
// kills it for good.
func TestE2BResumeRace(t *testing.T) {
	for _, who := range []string{"tether", "runner"} {
		t.Run(who, func(t *testing.T) {
			t.Parallel()
			// The restore is held until the drain has met the 404 it must
			// not believe, then lands: the race's window, by hand
			// (the seeded fault, resume-race, times it instead).
			w := newE2BWorld(t)
			w.e2b.HoldRestores()
			p := w.runE2B([]string{"--e2b-restore-window", "8s"}, "url", "e2b:1", "pause:0", "resumebg:0")
			out := p.ready()
			id := ids(out.of("created"), sandboxOf)[0]
			testutil.Eventually(t, "the restore under way", func() (bool, string) {
				sb, _ := w.e2b.Sandbox(id)
				return sb.State == e2btest.StateResuming, sb.State
			})
			if who == "runner" {
				// The runner's own kill, through tether's proxy, while its
				// resume is under way (sent here, after the restore
				// started: two calls of one runner reach E2B in no set
				// order).
				status, err := rawKill(out.of("url")[0].name, id)
				if err != nil || status != http.StatusNoContent {
					t.Fatalf("the runner's kill: %d, %v", status, err)
				}
			}
			before := w.e2b.CallsFor(id)
			syscall.Kill(out.pid, syscall.SIGKILL)
			testutil.Eventually(t, "the drain meets the 404", func() (bool, string) {
				calls := w.e2b.CallsFor(id)
				if who == "runner" {
					return calls[e2btest.RouteGet] > before[e2btest.RouteGet], fmt.Sprint(calls)
				}
				return calls[e2btest.RouteKill] > 0, fmt.Sprint(calls)
			})
			w.e2b.ReleaseRestores()
			p.wait()
			sb, _ := w.e2b.Sandbox(id)
			if sb.State != e2btest.StateKilled || sb.KillReason != e2btest.KillRequest || sb.Revived != 1 {
				t.Fatalf("after the drain: %+v; want killed for good after the restore brought it back", sb)
			}
			if n := w.kills(id); n != 2 {
				t.Errorf("%d DELETEs, want 2 (the first undone by the restore)", n)
			}
			if rep := mustReport(t, p.stderr.String()); rep.counts["gone"] != 1 || rep.left != 0 {
				t.Errorf("report %+v", rep)
			}
		})
	}
}

// TestE2BTeamCredentials: a runner creates one sandbox with its team's
// second key and one with an auth provider's token and X-Team-ID, and is
// killed. Every credential of a team acts for the whole team: tether's
// read with its own key answers for both sandboxes, which proves them of
// its team, and the drain kills them, reporting nothing left.
func TestE2BTeamCredentials(t *testing.T) {
	t.Parallel()
	w := newE2BWorld(t)
	const secondKey = "e2b_5ec0de5ec0de5ec0de5ec0de5ec0de5ec0de5ec0"
	w.e2b.AddKey(secondKey, e2btest.DefaultTeam)
	w.e2b.AddBearer("jwt-of-a-member", e2btest.DefaultTeam)
	p := w.runE2B(nil, "key:"+secondKey, "e2b:1", "bearer:jwt-of-a-member@"+e2btest.DefaultTeam, "e2b:1")
	out := p.ready()
	created := ids(out.of("created"), sandboxOf)
	if len(created) != 2 {
		t.Fatalf("runner: %+v", out.lines)
	}
	syscall.Kill(out.pid, syscall.SIGKILL)
	p.wait()
	w.killedOnce(created...)
	if rep := mustReport(t, p.stderr.String()); rep.counts["gone"] != 2 || rep.left != 0 {
		t.Fatalf("report %+v, want both drained, none reported", rep)
	}
}

// TestE2BBlockedTeam: the team is blocked while the runner works. Its
// renewals and creates are refused, but a blocked team may still read,
// list and delete (middleware/blocked_team.go:14-47): the drain kills
// every sandbox.
func TestE2BBlockedTeam(t *testing.T) {
	t.Parallel()
	w := newE2BWorld(t)
	p := w.runE2B(nil, "timeout:3000", "e2b:3")
	out := p.ready()
	created := ids(out.of("created"), sandboxOf)
	w.e2b.BlockTeam(e2btest.DefaultTeam, "unpaid invoice")
	syscall.Kill(out.pid, syscall.SIGKILL)
	p.wait()
	w.killedOnce(created...)
	if rep := mustReport(t, p.stderr.String()); rep.counts["gone"] != 3 || rep.left != 0 {
		t.Fatalf("report %+v", rep)
	}
}

// TestKeptSurvivesSweep: on both clouds, a sandbox released as kept outside
// lease mode (declared over the socket) is handed back and survives
// `tether sweep --yes` once old and idle. Daytona's is labelled
// tether-keep=true, while a stale sandbox of this owner without it is
// deleted by the same sweep; E2B's cannot be labelled, so the sweep
// deletes no E2B sandbox without --include-unmarkable, and the kept one,
// paused, stays. A kept E2B sandbox still running gets back the end its
// runner asked for, which the cap had cut.
func TestKeptSurvivesSweep(t *testing.T) {
	t.Parallel()
	w := newE2BWorld(t)
	args := append(w.tetherArgs("run"), "--label", "sweep=kept", "--drain-timeout", drainTimeout, "--e2b-max-timeout", "10m", "--", "sleep", "600")
	p := w.start(args...)
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	c := w.client()
	declare := func(provider string) intentapi.Intent {
		t.Helper()
		var in intentapi.Intent
		testutil.Eventually(t, "an intent declared over the socket", func() (bool, string) {
			var err error
			in, err = c.CreateIntent(ctx, intentapi.CreateRequest{Provider: provider})
			return err == nil, fmt.Sprint(err)
		})
		return in
	}
	release := func(in intentapi.Intent, sandbox string) {
		t.Helper()
		if _, err := c.Observe(ctx, in.ID, sandbox); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Release(ctx, in.ID, intent.OutcomeKept); err != nil {
			t.Fatal(err)
		}
	}
	dIn := declare(intent.DefaultProvider)
	dKept, err := w.sim.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Name: dIn.Name, Labels: dIn.Labels})
	if err != nil {
		t.Fatal(err)
	}
	release(dIn, dKept.ID)
	stale, err := w.sim.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Name: "tether-" + newIntentID(),
		Labels: map[string]string{intent.LabelOwner: w.owner, intent.LabelIntent: newIntentID(), "sweep": "kept"}})
	if err != nil {
		t.Fatal(err)
	}

	prov := testutil.E2BProvider(t, w.e2b)
	var eKept [2]string
	for i := range eKept {
		in := declare(e2b.ProviderName)
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
		if i == 0 {
			if err := prov.Stop(ctx, sb.ID); err != nil { // paused: what a sweep could take
				t.Fatal(err)
			}
		}
		if _, err := c.Release(ctx, in.ID, intent.OutcomeKept); err != nil {
			t.Fatal(err)
		}
		eKept[i] = sb.ID
	}
	testutil.Eventually(t, "the kept Daytona sandbox labelled while the runner lives", func() (bool, string) {
		sb, _ := w.sim.Sandbox(dKept.ID)
		return sb.Labels[provider.LabelKeep] == "true", fmt.Sprint(sb.Labels)
	})
	if code := p.stop(syscall.SIGTERM); code != 0 && code != 128+int(syscall.SIGTERM) {
		t.Fatalf("tether run: exit %d\n%s", code, p.stderr)
	}
	if rec, _ := w.e2b.Sandbox(eKept[1]); time.Until(rec.EndAt) < 45*time.Minute {
		t.Errorf("the kept running E2B sandbox ends in %s, want the 50 min its runner asked for", time.Until(rec.EndAt))
	}
	for _, prov := range []string{"daytona", "e2b"} {
		code, stderr := w.runTether("sweep", "--provider", prov, "--yes", "--owner", w.owner, "--label", "sweep=kept", "--older-than", "1ms", "--idle-for", "1ms")
		if code != 0 {
			t.Fatalf("tether sweep --provider %s: exit %d\n%s", prov, code, stderr)
		}
	}
	if sb, _ := w.sim.Sandbox(dKept.ID); sb.DeleteRequested || sb.State != "started" {
		t.Errorf("the kept Daytona sandbox after the sweep: %+v", sb)
	}
	if sb, _ := w.sim.Sandbox(stale.ID); !sb.DeleteRequested {
		t.Errorf("the stale Daytona sandbox without the label was left: the sweep did nothing (%+v)", sb)
	}
	for _, id := range eKept {
		if sb, _ := w.e2b.Sandbox(id); sb.State == e2btest.StateKilled || w.kills(id) != 0 {
			t.Errorf("the kept E2B sandbox %s after the sweep: %+v", id, sb)
		}
	}
	if strings.Contains(p.stderr.String(), "level=ERROR") {
		t.Logf("tether run's errors:\n%s", p.stderr)
	}
}
