//go:build docker

package docker_test

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
	"github.com/tether-run/tether/provider/e2b"
	"github.com/tether-run/tether/provider/e2b/e2btest"
)

// A cloud is one simulated provider the container's runner uses: what the
// container is given to reach it, the runner that holds sandboxes on it,
// and the simulator's verdict on them. TestDockerStop50 and
// TestDockerKillReplay run one body over each.
type cloud interface {
	env() []string
	// holder is the container's command: a runner that creates n
	// sandboxes (under run=label where the cloud's runner takes a label)
	// and holds them until it dies, with no cleanup.
	holder(n int, label string) []string
	// plantNeighbours plants, beside the runner's sandboxes (ids), ones
	// that look like them but are not this tether's, in the same account
	// and another; the world checks at its end that none was touched.
	plantNeighbours(ids []string)
	// assertGone: by the simulator's record, each of ids ended by tether's
	// request (and, with a label, the run has no other sandbox).
	assertGone(label string, ids []string)
	// assertLeft: each of ids is still live and was never asked to end.
	assertLeft(label string, ids []string)
}

// stop50 is TestDockerStop50's body on cloud w: `docker stop` (10 s) of a
// container whose runner holds 50 live sandboxes, neighbours planted
// beside them. Every one is confirmed ended by the simulator, and tether
// finished by itself (143, the runner's SIGTERM) before Docker's SIGKILL
// (137). Repeated $TETHER_DOCKER_STOP_RUNS times, each on a fresh volume;
// the durations are logged (go test -v) for docs/benchmarks.md.
func stop50(t *testing.T, w cloud) {
	const sandboxes = 50
	runs := stopRuns(t)
	var stops, drains []time.Duration
	for i := range runs {
		label := fmt.Sprintf("stop-%d", i)
		c := run(t, image, runOpts{
			docker: []string{"-v", newVolume(t) + ":/var/lib/tether"},
			env:    w.env(),
			args:   w.holder(sandboxes, label),
		})
		ids := created(c.ready())
		if len(ids) != sandboxes {
			t.Fatalf("run %d: the runner created %d sandboxes, want %d", i, len(ids), sandboxes)
		}
		w.plantNeighbours(ids)
		took, code := c.stop()
		if code != exitTERM {
			t.Errorf("run %d: exit %d, want %d (tether done before the SIGKILL)", i, code, exitTERM)
		}
		total, drain, left := drainReport(t, c.stderr.String())
		if total != sandboxes || left != 0 {
			t.Errorf("run %d: report: %d intents, %d left live; want %d, 0", i, total, left, sandboxes)
		}
		w.assertGone(label, ids)
		stops, drains = append(stops, took), append(drains, drain)
		t.Logf("run %d: docker stop took %s, tether's drain %s", i, took.Round(time.Millisecond), drain)
		if t.Failed() {
			return
		}
	}
	slices.Sort(stops)
	slices.Sort(drains)
	t.Logf("%d runs of %d sandboxes, none leaked: docker stop min %s median %s max %s; drain min %s median %s max %s",
		runs, sandboxes, stops[0].Round(time.Millisecond), stops[len(stops)/2].Round(time.Millisecond), stops[len(stops)-1].Round(time.Millisecond),
		drains[0], drains[len(drains)/2], drains[len(drains)-1])
}

// killReplay is TestDockerKillReplay's body on cloud w: `docker kill -s
// KILL` leaves the sandboxes live and the journal on its named volume; a
// new container on that volume (the sample runner with nothing to create,
// waiting for tether to be idle) replays it, and the simulator confirms
// every sandbox ended and no neighbour touched.
func killReplay(t *testing.T, w cloud) {
	const sandboxes = 10
	vol := newVolume(t)
	c := run(t, image, runOpts{
		docker: []string{"-v", vol + ":/var/lib/tether"},
		env:    w.env(),
		args:   w.holder(sandboxes, "kill"),
	})
	ids := created(c.ready())
	if len(ids) != sandboxes {
		t.Fatalf("the runner created %d sandboxes, want %d", len(ids), sandboxes)
	}
	w.plantNeighbours(ids)
	mustDocker(t, "kill", "-s", "KILL", c.name)
	if code := c.wait(); code != exitKILL {
		t.Fatalf("exit %d after docker kill, want %d", code, exitKILL)
	}
	// Nothing could clean up: every sandbox is still there.
	w.assertLeft("kill", ids)
	if t.Failed() {
		t.FailNow()
	}

	next := run(t, image, runOpts{
		docker: []string{"-v", vol + ":/var/lib/tether"},
		env:    w.env(),
		args:   []string{"runner", "--sandboxes", "0", "--wait-idle", "--label", "kill-next"},
	})
	if code := next.wait(); code != 0 {
		t.Fatalf("the next container exited %d, want 0", code)
	}
	replayed := regexp.MustCompile(fmt.Sprintf(`msg="replay: resolving intents an earlier run left live".* live=%d\b`, sandboxes))
	if !replayed.MatchString(next.stderr.String()) {
		t.Errorf("the next container did not report the replay of %d intents:\n%s", sandboxes, next.stderr)
	}
	w.assertGone("kill", ids)
}

// --- Daytona ---

// otherDaytonaOrg is the other account a neighbour is planted in.
const otherDaytonaOrg = "org-other"

// holder is the sample runner (test/runner): it declares each sandbox
// over the socket and creates it with the official api-client-go, auto-stop
// off.
func (w *world) holder(n int, label string) []string {
	return []string{"runner", "--sandboxes", fmt.Sprint(n), "--label", label}
}

// plantNeighbours plants a sandbox of another tether (our intent's labels
// and name, another owner) in our organization, and a copy of one of ours
// in another organization, both with auto-stop off so that even tether's
// backstop would show.
func (w *world) plantNeighbours(ids []string) {
	w.t.Helper()
	ours, ok := w.sim.Sandbox(ids[0])
	if !ok {
		w.t.Fatalf("sandbox %s is not in the simulator", ids[0])
	}
	other := maps.Clone(ours.Labels)
	other[intent.LabelOwner] = "someone-else"
	off := 0
	for _, seed := range []struct {
		org string
		sb  daytonatest.SeedSandbox
	}{
		{daytonatest.DefaultOrg, daytonatest.SeedSandbox{Name: "neighbour-" + randomHex(3), Labels: other, AutoStopInterval: &off}},
		{otherDaytonaOrg, daytonatest.SeedSandbox{Name: ours.Name, Labels: maps.Clone(ours.Labels), AutoStopInterval: &off}},
	} {
		sb, err := w.sim.AddSandbox(seed.org, seed.sb)
		if err != nil {
			w.t.Fatal(err)
		}
		w.neighbours = append(w.neighbours, sb.ID)
	}
}

// checkNeighbours: no neighbour was deleted, stopped or given an auto-stop.
func (w *world) checkNeighbours() {
	w.t.Helper()
	for _, id := range w.neighbours {
		sb, _ := w.sim.Sandbox(id)
		if sb.State != "started" || sb.DeleteRequested || sb.AutoStopInterval != 0 {
			w.t.Errorf("neighbour %s (%s in %s, labels %v) was touched: state %s, delete requested %v, auto-stop %d", id, sb.Name, sb.Org, sb.Labels, sb.State, sb.DeleteRequested, sb.AutoStopInterval)
		}
	}
}

func (w *world) assertGone(label string, ids []string) {
	w.t.Helper()
	if label != "" {
		w.assertAllDestroyed(label, len(ids))
	}
	for _, id := range ids {
		if sb, ok := w.sim.Sandbox(id); !ok || sb.State != "destroyed" || !sb.DeleteRequested {
			w.t.Errorf("sandbox %s (%s): state %s, delete requested %v; want destroyed", id, sb.Name, sb.State, sb.DeleteRequested)
		}
	}
	// Beyond the ids the runner printed: the simulator's record holds
	// nothing else alive but the neighbours.
	for _, sb := range w.sim.Sandboxes() {
		if sb.State != "destroyed" && !slices.Contains(w.neighbours, sb.ID) {
			w.t.Errorf("sandbox %s (%s in %s, labels %v) is %s: neither the runner's (all ended) nor a neighbour", sb.ID, sb.Name, sb.Org, sb.Labels, sb.State)
		}
	}
	w.checkNeighbours()
}

func (w *world) assertLeft(label string, ids []string) {
	w.t.Helper()
	if n := len(w.ours(label)); n != len(ids) {
		w.t.Errorf("the simulator has %d sandboxes of run %s, want %d", n, label, len(ids))
	}
	for _, sb := range w.ours(label) {
		if sb.State != "started" || sb.DeleteRequested {
			w.t.Errorf("sandbox %s is %s (delete requested %v); it should be left as it was", sb.ID, sb.State, sb.DeleteRequested)
		}
	}
}

// --- E2B ---

// The other E2B team a neighbour is planted in, and its key.
const (
	otherE2BTeam = "team-other"
	otherE2BKey  = "e2b_fedcba9876543210fedcba9876543210fedcba98"
)

// e2bWorld is the simulated E2B API on the host's loopback, as the
// Daytona one: the container reaches it with --network host.
type e2bWorld struct {
	t   *testing.T
	sim *e2btest.Server
	// declared: the runner is the sample runner with --provider e2b,
	// which declares each sandbox over the socket before its create;
	// otherwise test/e2brunner, which knows nothing of tether.
	declared   bool
	neighbours []string
}

// newE2BWorld serves a simulated E2B whose team may run 200 sandboxes at
// once (the default, 20, is a hobby tier's). A kill takes simDestroyDelay:
// E2B answers it once the sandbox is gone (handlers/sandbox_kill.go).
func newE2BWorld(t *testing.T) *e2bWorld {
	t.Helper()
	sim, _ := testutil.E2B(t, e2btest.WithCreateDelay(simCreateDelay), e2btest.WithKillDelay(simDestroyDelay))
	sim.AddTeam(e2btest.DefaultTeam, e2btest.Limits{Concurrency: 200})
	sim.AddKey(otherE2BKey, otherE2BTeam)
	w := &e2bWorld{t: t, sim: sim}
	t.Cleanup(w.checkNeighbours) // before the simulator closes
	return w
}

func (w *e2bWorld) env() []string {
	return testutil.E2BEnv(w.sim)
}

// holder is test/e2brunner, a runner that knows nothing of tether: it
// creates each sandbox with the SDKs' POST /sandboxes (template, timeout
// 300 s, its own metadata) at E2B_API_URL, which tether points at its
// E2B proxy, where the create is journaled. It takes no label: the E2B
// checks go by sandbox id. A declared world's holder is the sample runner:
// it declares each sandbox over the socket (provider e2b) and creates it
// with tether's metadata, which the proxy passes as it is, and observes it.
func (w *e2bWorld) holder(n int, label string) []string {
	if w.declared {
		return []string{"runner", "--provider", "e2b", "--sandboxes", fmt.Sprint(n), "--label", label}
	}
	return []string{"e2brunner", fmt.Sprintf("e2b:%d", n)}
}

// plantNeighbours plants, from the metadata tether gave one of ours: a
// sandbox of another tether of the team (our intent and name, another
// owner), one of our owner with an intent our journal never held, and a
// copy of ours in another team. Each runs for 50 minutes unless touched.
func (w *e2bWorld) plantNeighbours(ids []string) {
	w.t.Helper()
	ours, ok := w.sim.Sandbox(ids[0])
	if !ok || ours.Metadata[intent.LabelOwner] == "" {
		w.t.Fatalf("sandbox %s: %+v; want one of ours, with tether's metadata", ids[0], ours)
	}
	other := maps.Clone(ours.Metadata)
	other[intent.LabelOwner] = "someone-else"
	stray := maps.Clone(ours.Metadata)
	stray[intent.LabelIntent] = "01neighbour" + randomHex(6)
	stray[e2b.MetadataName] = "tether-neighbour-" + randomHex(3)
	for _, seed := range []struct {
		team string
		md   map[string]string
	}{
		{e2btest.DefaultTeam, other},
		{e2btest.DefaultTeam, stray},
		{otherE2BTeam, maps.Clone(ours.Metadata)},
	} {
		sb := w.sim.AddSandbox(seed.team, e2btest.SeedSandbox{Metadata: seed.md, Timeout: 50 * time.Minute})
		w.neighbours = append(w.neighbours, sb.ID)
	}
}

// checkNeighbours: every neighbour still runs, and no request named it.
func (w *e2bWorld) checkNeighbours() {
	w.t.Helper()
	for _, id := range w.neighbours {
		sb, _ := w.sim.Sandbox(id)
		if calls := w.sim.CallsFor(id); sb.State != e2btest.StateRunning || len(calls) != 0 {
			w.t.Errorf("neighbour %s (team %s, metadata %v) was touched: %s, calls %v", id, sb.Team, sb.Metadata, sb.State, calls)
		}
	}
}

// assertGone: each of ids was killed by a request, after exactly one
// DELETE, and the team holds no sandbox but the runners' and the
// neighbours'.
func (w *e2bWorld) assertGone(_ string, ids []string) {
	w.t.Helper()
	for _, id := range ids {
		sb, ok := w.sim.Sandbox(id)
		if !ok || sb.State != e2btest.StateKilled || sb.KillReason != e2btest.KillRequest {
			w.t.Errorf("sandbox %s: state %s (%s); want killed by a request", id, sb.State, sb.KillReason)
		}
		if n := w.sim.CallsFor(id)[e2btest.RouteKill]; n != 1 {
			w.t.Errorf("sandbox %s received %d DELETEs, want 1", id, n)
		}
	}
	for _, sb := range w.sim.Sandboxes() {
		if sb.State != e2btest.StateKilled && !slices.Contains(w.neighbours, sb.ID) {
			w.t.Errorf("sandbox %s (team %s, metadata %v) is %s: neither the runner's (all ended) nor a neighbour", sb.ID, sb.Team, sb.Metadata, sb.State)
		}
	}
	w.checkNeighbours()
}

func (w *e2bWorld) assertLeft(_ string, ids []string) {
	w.t.Helper()
	for _, id := range ids {
		sb, _ := w.sim.Sandbox(id)
		if calls := w.sim.CallsFor(id); sb.State != e2btest.StateRunning || calls[e2btest.RouteKill] != 0 {
			w.t.Errorf("sandbox %s is %s after %d DELETEs; it should be left as it was", id, sb.State, calls[e2btest.RouteKill])
		}
	}
}

// TestDockerStop50E2B is TestDockerStop50 for E2B: a zero-code runner
// holds 50 sandboxes created through tether's E2B proxy.
func TestDockerStop50E2B(t *testing.T) { stop50(t, newE2BWorld(t)) }

// TestDockerKillReplayE2B is TestDockerKillReplay for E2B, with the
// sandboxes journaled by each intake a runner of E2B uses: the E2B proxy
// (before each create of a runner that knows nothing of tether) and the
// socket (declared with provider e2b). The next container, with E2B
// credentials only, replays the journal.
func TestDockerKillReplayE2B(t *testing.T) {
	for _, declared := range []bool{false, true} {
		name := "zero-code"
		if declared {
			name = "declared over the socket"
		}
		t.Run(name, func(t *testing.T) {
			w := newE2BWorld(t)
			w.declared = declared
			killReplay(t, w)
		})
	}
}

// TestDockerStopBothClouds: one container guards a runner of both clouds
// with 10 sandboxes on each; `docker stop` ends all 20 in one drain, each
// on its own cloud, and touches no neighbour on either. The runner is
// test/e2brunner (zero code: its creates go through tether's Daytona and
// E2B proxies), or the sample runner, which declares each sandbox over the
// socket with its provider.
func TestDockerStopBothClouds(t *testing.T) {
	const each = 10
	for _, tc := range []struct {
		name   string
		runner []string
	}{
		{"zero-code", []string{"e2brunner", fmt.Sprintf("daytona:%d", each), fmt.Sprintf("e2b:%d", each)}},
		{"declared over the socket", []string{"runner", "--provider", "daytona,e2b", "--sandboxes", fmt.Sprint(2 * each), "--label", "both"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, e := newWorld(t), newE2BWorld(t)
			c := run(t, image, runOpts{
				docker: []string{"-v", newVolume(t) + ":/var/lib/tether"},
				env:    append(d.env(), e.env()...),
				args:   tc.runner,
			})
			var onDaytona, onE2B []string
			for _, id := range created(c.ready()) {
				if _, ok := d.sim.Sandbox(id); ok {
					onDaytona = append(onDaytona, id)
				} else if _, ok := e.sim.Sandbox(id); ok {
					onE2B = append(onE2B, id)
				}
			}
			if len(onDaytona) != each || len(onE2B) != each {
				t.Fatalf("the runner created %d Daytona and %d E2B sandboxes, want %d of each", len(onDaytona), len(onE2B), each)
			}
			d.plantNeighbours(onDaytona)
			e.plantNeighbours(onE2B)
			if _, code := c.stop(); code != exitTERM {
				t.Errorf("exit %d, want %d (tether done before the SIGKILL)", code, exitTERM)
			}
			if total, _, left := drainReport(t, c.stderr.String()); total != 2*each || left != 0 {
				t.Errorf("report: %d intents, %d left live; want %d, 0", total, left, 2*each)
			}
			d.assertGone("", onDaytona)
			e.assertGone("", onE2B)
		})
	}
}
