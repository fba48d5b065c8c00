package e2b_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/e2b"
	"github.com/tether-run/tether/provider/e2b/e2btest"
)

// testRestoreWindow is the reaper's restore window in these tests: the
// simulator's restores land within it.
const testRestoreWindow = 300 * time.Millisecond

// tether's own reaper, unchanged, drains E2B intents through this
// provider; the simulator's record judges. Nothing here is wired into
// cmd/tether: it shows the provider fits the reaper as it is.

type drainWorld struct {
	*env
	j *journal.Journal
	r *reaper.Reaper
}

func newDrainWorld(t *testing.T, opts ...e2btest.Option) *drainWorld {
	t.Helper()
	e := newEnv(t, opts...)
	j, err := journal.Open(filepath.Join(t.TempDir(), "journal.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	log := slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r := &reaper.Reaper{
		Journal: j, Providers: provider.NewSet(e.p), Logger: log,
		RetryBase: 10 * time.Millisecond, RetryMax: 100 * time.Millisecond,
		PollInterval: 10 * time.Millisecond, PollMax: 50 * time.Millisecond, LookupPollMax: 100 * time.Millisecond,
		ConfirmDelay: 5 * time.Millisecond, RecheckDelay: 5 * time.Millisecond,
		NeverCreatedHorizon: 300 * time.Millisecond, RestoreWindow: testRestoreWindow,
	}
	return &drainWorld{env: e, j: j, r: r}
}

func (w *drainWorld) intent(account string) intent.Intent {
	w.t.Helper()
	return w.intentDrained(account, intent.DrainDelete)
}

func (w *drainWorld) intentDrained(account string, on intent.OnDrain) intent.Intent {
	w.t.Helper()
	in, _, err := w.j.Create(context.Background(), intent.Declaration{
		Labels: map[string]string{"scope": "s1"}, Provider: e2b.ProviderName, Account: account, OnDrain: on,
	})
	if err != nil {
		w.t.Fatal(err)
	}
	return in
}

func (w *drainWorld) resolve(in intent.Intent) (intent.Intent, error) {
	w.t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := w.r.Resolve(c, in)
	noKey(w.t, err)
	return out, err
}

// A runner died after its create landed but before it saw the answer:
// the drain finds the sandbox by tether's metadata, verifies it, kills
// it, and confirms it gone by the 404 that follows.
func TestDrainLostCreate(t *testing.T) {
	w := newDrainWorld(t)
	in := w.intent(w.p.Account())
	w.srv.SetFaults(e2btest.Faults{RateCreateLost: 1, Routes: []string{e2btest.RouteCreate}})
	if _, err := w.p.Create(ctx, in.Name, in.Labels, e2b.CreateOptions{}); err == nil {
		t.Fatal("the lost create answered")
	}
	w.srv.SetFaults(e2btest.Faults{})
	out, err := w.resolve(in)
	if err != nil || out.State != intent.Gone {
		t.Fatalf("Resolve = %s, %v; want gone", out.State, err)
	}
	all := w.srv.Sandboxes()
	if len(all) != 1 || all[0].State != e2btest.StateKilled || all[0].KillReason != e2btest.KillRequest || out.SandboxID != all[0].ID {
		t.Errorf("simulator: %+v, intent observed %s", all, out.SandboxID)
	}
	if got := w.srv.CallsFor(all[0].ID)[e2btest.RouteKill]; got != 1 {
		t.Errorf("%d kills, want 1", got)
	}
}

// An observed, auto-paused sandbox is killed too, snapshot and all.
func TestDrainPausedSandbox(t *testing.T) {
	w := newDrainWorld(t)
	in := w.intent(w.p.Account())
	sb, err := w.p.Create(ctx, in.Name, in.Labels, e2b.CreateOptions{AutoPause: true, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if in, err = w.j.Observe(in.ID, sb.ID); err != nil {
		t.Fatal(err)
	}
	w.srv.Expire(sb.ID)
	if f := w.fate(sb.ID); f.State != e2btest.StatePaused {
		t.Fatalf("after its timeout: %s", f.State)
	}
	out, err := w.resolve(in)
	if err != nil || out.State != intent.Gone {
		t.Fatalf("Resolve = %s, %v", out.State, err)
	}
	if f := w.fate(sb.ID); f.State != e2btest.StateKilled || f.Snapshot {
		t.Errorf("fate %+v", f)
	}
}

// An intent drained by stopping pauses its sandbox: stopped, its
// snapshot kept; a sandbox already paused is stopped already.
func TestDrainStopPauses(t *testing.T) {
	w := newDrainWorld(t)
	for _, pausedFirst := range []bool{false, true} {
		in := w.intentDrained(w.p.Account(), intent.DrainStop)
		sb := w.create(in.Name, in.Labels)
		if pausedFirst {
			if err := w.p.Stop(ctx, sb.ID); err != nil {
				t.Fatal(err)
			}
		}
		out, err := w.resolve(in)
		if err != nil || out.State != intent.Stopped {
			t.Fatalf("paused first %v: Resolve = %s, %v; want stopped", pausedFirst, out.State, err)
		}
		if f := w.fate(sb.ID); f.State != e2btest.StatePaused || !f.Snapshot || f.Pauses != 1 {
			t.Errorf("paused first %v: fate %+v", pausedFirst, f)
		}
	}
}

// A sandbox of the same team under the intent's name but another owner's
// labels is never touched; the intent ends foreign.
func TestDrainForeignUntouched(t *testing.T) {
	w := newDrainWorld(t)
	in := w.intent(w.p.Account())
	labels := map[string]string{}
	for k, v := range in.Labels {
		labels[k] = v
	}
	labels[intent.LabelOwner] = "someone-else"
	foreign := w.create(in.Name, labels)
	out, err := w.resolve(in)
	if out.State != intent.Foreign {
		t.Fatalf("Resolve = %s, %v; want foreign", out.State, err)
	}
	if f := w.fate(foreign.ID); f.State != e2btest.StateRunning || w.srv.CallsFor(foreign.ID)[e2btest.RouteKill] != 0 {
		t.Errorf("the foreign sandbox: %+v, calls %v", f, w.srv.CallsFor(foreign.ID))
	}
}

// An intent recorded under another team's key: tether's read of its
// sandbox answers 404, as for one that is gone, so nothing proves the two
// keys of one team. The intent stays live (wrong account), its sandbox
// untouched: no kill, one read.
func TestDrainOtherTeamsKeyLeftLive(t *testing.T) {
	w := newDrainWorld(t)
	w.srv.AddKey("e2b_other_key", "team-2")
	theirs := w.provider("e2b_other_key", time.Second, http.DefaultTransport)
	in := w.intent(theirs.Account())
	sb, err := theirs.Create(ctx, in.Name, in.Labels, e2b.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if in, err = w.j.Observe(in.ID, sb.ID); err != nil {
		t.Fatal(err)
	}
	out, err := w.resolve(in)
	if !errors.Is(err, reaper.ErrWrongAccount) || !out.Live() {
		t.Fatalf("Resolve: %s, %v; want live, ErrWrongAccount", out.State, err)
	}
	if calls := w.srv.CallsFor(sb.ID); calls[e2btest.RouteGet] != 1 || calls[e2btest.RouteKill] != 0 {
		t.Errorf("calls for another team's sandbox: %v, want one read", calls)
	}
	if f := w.fate(sb.ID); f.State != e2btest.StateRunning {
		t.Errorf("another team's sandbox is %s", f.State)
	}
	// Lost creates too: a name tether's key cannot find says nothing.
	lost := w.intent(theirs.Account())
	if out, err := w.resolve(lost); !errors.Is(err, reaper.ErrWrongAccount) || out.State != intent.Pending {
		t.Errorf("a lost create under another team's key: %s, %v; want pending, ErrWrongAccount", out.State, err)
	}
}

// The team's second key, and an auth provider's bearer (its account the
// team's, X-Team-ID): every credential of a team acts for all of it
// (spec/openapi.yml:10-42), so a read with tether's own key that answers
// proves the account of tether's team; the intent is drained, and a lost
// create of that account found by name.
func TestDrainSecondKeyOfTheTeam(t *testing.T) {
	w := newDrainWorld(t)
	w.srv.AddKey("e2b_second_key", e2btest.DefaultTeam)
	second := w.provider("e2b_second_key", time.Second, http.DefaultTransport)
	for _, account := range []string{second.Account(), e2b.TeamFingerprint(w.srv.URL, e2btest.DefaultTeam)} {
		in := w.intent(account)
		sb, err := second.Create(ctx, in.Name, in.Labels, e2b.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if in, err = w.j.Observe(in.ID, sb.ID); err != nil {
			t.Fatal(err)
		}
		if out, err := w.resolve(in); err != nil || out.State != intent.Gone {
			t.Fatalf("account %s: Resolve = %s, %v; want gone", account, out.State, err)
		}
		if f := w.fate(sb.ID); f.State != e2btest.StateKilled || f.KillReason != e2btest.KillRequest {
			t.Errorf("account %s: %+v", account, f)
		}
		lost := w.intent(account)
		lsb, err := second.Create(ctx, lost.Name, lost.Labels, e2b.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if out, err := w.resolve(lost); err != nil || out.State != intent.Gone || out.SandboxID != lsb.ID {
			t.Errorf("account %s: lost create: %s %s, %v", account, out.State, out.SandboxID, err)
		}
	}
}

// A sandbox of another team with the intent's very metadata and observed
// id answers 404: under the intent's own account that is what gone means,
// and the other team's sandbox is untouched.
func TestDrainOtherTeamsSandbox404(t *testing.T) {
	w := newDrainWorld(t)
	in := w.intent(w.p.Account())
	md := map[string]string{e2b.MetadataName: in.Name}
	for k, v := range in.Labels {
		md[k] = v
	}
	theirs := w.srv.AddSandbox("team-2", e2btest.SeedSandbox{Metadata: md, Timeout: time.Hour})
	var err error
	if in, err = w.j.Observe(in.ID, theirs.ID); err != nil {
		t.Fatal(err)
	}
	out, err := w.resolve(in)
	if err != nil || out.State != intent.Gone {
		t.Fatalf("Resolve = %s, %v", out.State, err)
	}
	if f := w.fate(theirs.ID); f.State != e2btest.StateRunning {
		t.Errorf("another team's sandbox is %s", f.State)
	}
}

// A create still in flight is found once its node answers; until then the
// drain waits (ErrNotCreated) rather than concluding.
func TestDrainCreateInFlight(t *testing.T) {
	w := newDrainWorld(t)
	w.r.NeverCreatedHorizon = time.Hour
	in := w.intent(w.p.Account())
	w.srv.HoldCreates()
	done := make(chan error, 1)
	go func() {
		_, err := w.p.Create(ctx, in.Name, in.Labels, e2b.CreateOptions{})
		done <- err
	}()
	testutil.WaitFor(t, "the create to be in flight", func() bool {
		all := w.srv.Sandboxes()
		return len(all) == 1 && all[0].State == e2btest.StateCreating
	})
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := w.r.Resolve(short, in)
	cancel()
	if err == nil || !(errors.Is(err, reaper.ErrNotCreated) || strings.Contains(err.Error(), "deadline")) {
		t.Fatalf("Resolve in flight: %v", err)
	}
	w.srv.ReleaseCreates()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	out, err := w.resolve(in)
	if err != nil || out.State != intent.Gone {
		t.Fatalf("Resolve = %s, %v", out.State, err)
	}
	if all := w.srv.Sandboxes(); all[0].State != e2btest.StateKilled {
		t.Errorf("fate %+v", all[0])
	}
}

// The drain of many intents, with seeded 5xx, 429 and failed kills, ends
// with every sandbox killed and every intent gone.
func TestDrainUnderFaults(t *testing.T) {
	w := newDrainWorld(t)
	w.srv.AddTeam(e2btest.DefaultTeam, e2btest.Limits{Concurrency: 100})
	var intents []intent.Intent
	for range 30 {
		in := w.intent(w.p.Account())
		sb := w.create(in.Name, in.Labels)
		in, err := w.j.Observe(in.ID, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		intents = append(intents, in)
	}
	w.srv.SetFaults(e2btest.Faults{Seed: 7, Rate5xx: 0.1, Rate429: 0.1, RateKillFail: 0.1, RetryAfter: time.Second})
	c, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	rep := w.r.Drain(c, intents)
	w.srv.SetFaults(e2btest.Faults{})
	for _, in := range intents {
		got, err := w.j.Get(in.ID)
		if err != nil || got.State != intent.Gone {
			t.Errorf("intent %s: %s, %v", in.ID, got.State, err)
		}
	}
	if n := w.srv.Live(); n != 0 {
		t.Errorf("%d sandboxes live after the drain; report %+v", n, rep)
	}
}

// lostForks forks the parent sandbox count times through the simulator with
// the answer lost, and journals count fork intents as the E2B proxy does
// (the parent's name, labels and intent): none of them learns its id.
func (w *drainWorld) lostForks(parent intent.Intent, count int) []intent.Intent {
	w.t.Helper()
	var forks []intent.Intent
	for range count {
		in, _, err := w.j.Create(ctx, intent.Declaration{
			Labels: map[string]string{"scope": "s1"}, Provider: e2b.ProviderName, Account: parent.Account,
			Name: parent.Name, ParentIntent: parent.ID,
		})
		if err != nil {
			w.t.Fatal(err)
		}
		forks = append(forks, in)
	}
	w.srv.SetFaults(e2btest.Faults{RateForkLost: 1, Routes: []string{e2btest.RouteFork}})
	defer w.srv.SetFaults(e2btest.Faults{})
	body := strings.NewReader(fmt.Sprintf(`{"count":%d,"timeout":600}`, count))
	req, _ := http.NewRequest("POST", w.srv.URL+"/sandboxes/"+parent.SandboxID+"/fork", body)
	req.Header.Set("X-API-Key", e2btest.DefaultKey)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		w.t.Fatalf("the lost fork answered %d", resp.StatusCode)
	}
	return forks
}

// observedParent is an intent whose sandbox is created and observed.
func (w *drainWorld) observedParent() intent.Intent {
	w.t.Helper()
	in := w.intent(w.p.Account())
	sb, err := w.p.Create(ctx, in.Name, in.Labels, e2b.CreateOptions{Timeout: 10 * time.Minute})
	if err != nil {
		w.t.Fatal(err)
	}
	if in, err = w.j.Observe(in.ID, sb.ID); err != nil {
		w.t.Fatal(err)
	}
	return in
}

// forksOf is the simulator's record of every fork of the sandbox id.
func (w *drainWorld) forksOf(id string) []e2btest.Sandbox {
	var out []e2btest.Sandbox
	for _, sb := range w.srv.Sandboxes() {
		if sb.ForkOf == id {
			out = append(out, sb)
		}
	}
	return out
}

// A fork of count 3 whose answer was lost, beside a fork whose answer was
// journaled: all five sandboxes carry the parent's name, and each intent
// takes one no other intent holds. Every fork is killed, the parent too,
// each intent ends gone with its own sandbox.
func TestDrainLostForks(t *testing.T) {
	w := newDrainWorld(t)
	parent := w.observedParent()
	known := w.lostForks(parent, 1)[0]
	first := w.forksOf(parent.SandboxID)[0].ID
	if _, err := w.j.Observe(known.ID, first); err != nil {
		t.Fatal(err)
	}
	lost := w.lostForks(parent, 3)
	all := append([]intent.Intent{parent, known}, lost...)
	rep := w.r.Drain(ctx, all)
	if rep.Gone != 5 {
		t.Fatalf("report %+v, want 5 gone", rep)
	}
	forks := w.forksOf(parent.SandboxID)
	if len(forks) != 4 {
		t.Fatalf("%d forks, want 4", len(forks))
	}
	for _, sb := range append(forks, w.fate(parent.SandboxID)) {
		if sb.State != e2btest.StateKilled || sb.KillReason != e2btest.KillRequest {
			t.Errorf("sandbox %s (fork of %q): %s %s, want killed by request", sb.ID, sb.ForkOf, sb.State, sb.KillReason)
		}
	}
	took := map[string]string{}
	for _, in := range all {
		got, _ := w.j.Get(in.ID)
		if other, dup := took[got.SandboxID]; dup || got.SandboxID == "" {
			t.Errorf("intent %s took sandbox %q, taken by %s too", in.ID, got.SandboxID, other)
		}
		took[got.SandboxID] = in.ID
	}
	if got, _ := w.j.Get(parent.ID); got.SandboxID != parent.SandboxID {
		t.Errorf("the parent's intent ended on sandbox %s, want its own %s", got.SandboxID, parent.SandboxID)
	}
}

// The parent's intent released as kept: its sandbox is the runner's, and
// no lost fork's intent takes it for its own, though it carries their
// name; the forks are killed.
func TestDrainLostForksOfAKeptParent(t *testing.T) {
	w := newDrainWorld(t)
	parent := w.observedParent()
	lost := w.lostForks(parent, 2)
	if _, err := w.j.Release(parent.ID, intent.OutcomeKept); err != nil {
		t.Fatal(err)
	}
	rep := w.r.Drain(ctx, lost)
	if rep.Gone != 2 {
		t.Fatalf("report %+v, want the 2 forks gone", rep)
	}
	if sb := w.fate(parent.SandboxID); sb.State != e2btest.StateRunning {
		t.Errorf("the kept parent: %s", sb.State)
	}
	for _, sb := range w.forksOf(parent.SandboxID) {
		if sb.State != e2btest.StateKilled {
			t.Errorf("fork %s: %s", sb.ID, sb.State)
		}
	}
}

// resume is a runner's POST /sandboxes/{id}/resume (the provider makes
// none), on a connection of its own.
func (w *drainWorld) resume(id string) (int, error) {
	return testutil.E2BCall(http.MethodPost, w.srv.URL, "/sandboxes/"+id+"/resume", `{"timeout":60}`)
}

// observed is a running sandbox of a new intent of tether's account,
// observed.
func (w *drainWorld) observed(o e2b.CreateOptions) (intent.Intent, provider.Sandbox) {
	w.t.Helper()
	in := w.intent(w.p.Account())
	sb, err := w.p.Create(ctx, in.Name, in.Labels, o)
	if err != nil {
		w.t.Fatal(err)
	}
	if in, err = w.j.Observe(in.ID, sb.ID); err != nil {
		w.t.Fatal(err)
	}
	return in, sb
}

// The healthy path: a sandbox read running just before its kill is gone
// at the 204: E2B kills before it answers and deletes the snapshot with
// it, and no restore of a running sandbox can be in flight. One read, one
// kill, whether or not an earlier read proved it ours.
func TestDrainRunningCostsOneReadOneKill(t *testing.T) {
	w := newDrainWorld(t)
	for _, vouched := range []bool{false, true} {
		in, sb := w.observed(e2b.CreateOptions{})
		if vouched {
			if err := w.r.Vouch(in, sb); err != nil {
				t.Fatal(err)
			}
		}
		out, err := w.resolve(in)
		if err != nil || out.State != intent.Gone {
			t.Fatalf("vouched %v: Resolve = %s, %v", vouched, out.State, err)
		}
		if calls := w.srv.CallsFor(sb.ID); calls[e2btest.RouteGet] != 1 || calls[e2btest.RouteKill] != 1 || len(calls) != 2 {
			t.Errorf("vouched %v: calls %v, want one read and one kill", vouched, calls)
		}
		if f := w.fate(sb.ID); f.State != e2btest.StateKilled {
			t.Errorf("vouched %v: %+v", vouched, f)
		}
	}
}

// A sandbox read paused before its kill (here one its timeout killed
// after a pause and a resume: it reads paused from its snapshot) is
// confirmed gone only by a read no sooner than the restore window after
// the 204: a restore in flight then could bring it back.
func TestDrainPausedConfirmedAfterTheRestoreWindow(t *testing.T) {
	w := newDrainWorld(t)
	in, sb := w.observed(e2b.CreateOptions{Timeout: time.Minute})
	if err := w.p.Stop(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if status, err := w.resume(sb.ID); err != nil || status != 201 {
		t.Fatalf("resume: %d %v", status, err)
	}
	w.srv.Expire(sb.ID)
	if f := w.fate(sb.ID); f.State != e2btest.StatePaused || f.Evictions != 1 {
		t.Fatalf("after its timeout: %+v, want paused from its snapshot", f)
	}
	start := time.Now()
	out, err := w.resolve(in)
	if err != nil || out.State != intent.Gone {
		t.Fatalf("Resolve = %s, %v", out.State, err)
	}
	f := w.fate(sb.ID)
	if f.State != e2btest.StateKilled || f.Snapshot {
		t.Errorf("fate %+v", f)
	}
	if took := time.Since(start); took < testRestoreWindow {
		t.Errorf("confirmed gone %s after the drain started, before the restore window (%s)", took, testRestoreWindow)
	}
	if calls := w.srv.CallsFor(sb.ID); calls[e2btest.RouteKill] != 1 || calls[e2btest.RouteGet] != 2 {
		t.Errorf("calls %v, want a read, the kill, and a read after the window", calls)
	}
}

// The kill/resume race (infra#3636): the runner resumed its paused
// sandbox and died with the restore in flight. The drain reads it paused,
// kills it (204), and while the restore runs it answers 404: the intent
// stays releasing, never gone. Once the restore lands the sandbox runs
// again; the read after the window finds it and kills it for good.
func TestDrainResumeRaceNotGoneWhileItRuns(t *testing.T) {
	w := newDrainWorld(t)
	w.r.RestoreWindow = 2 * time.Second
	in, sb := w.observed(e2b.CreateOptions{Timeout: time.Minute})
	if err := w.p.Stop(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	w.srv.HoldRestores()
	resumed := make(chan error, 1)
	go func() {
		_, err := w.resume(sb.ID)
		resumed <- err
	}()
	testutil.WaitFor(t, "the restore to start", func() bool { return w.fate(sb.ID).State == e2btest.StateResuming })
	done := make(chan intent.Intent, 1)
	go func() {
		out, _ := w.resolve(in)
		done <- out
	}()
	testutil.WaitFor(t, "the drain's kill", func() bool { return w.srv.CallsFor(sb.ID)[e2btest.RouteKill] == 1 })
	if _, err := w.p.Get(ctx, sb.ID); !errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("during the restore, after the 204: %v, want 404", err)
	}
	if cur, _ := w.j.Get(in.ID); cur.State != intent.Releasing {
		t.Fatalf("the intent is %s while the restore runs, want releasing", cur.State)
	}
	w.srv.ReleaseRestores()
	if err := <-resumed; err != nil {
		t.Fatal(err)
	}
	out := <-done
	f := w.fate(sb.ID)
	if out.State != intent.Gone || f.State != e2btest.StateKilled || f.Revived != 1 {
		t.Fatalf("intent %s, fate %+v; want gone and killed after it came back", out.State, f)
	}
	if kills := w.srv.CallsFor(sb.ID)[e2btest.RouteKill]; kills != 2 {
		t.Errorf("%d kills, want 2 (the first undone by the restore)", kills)
	}
}
