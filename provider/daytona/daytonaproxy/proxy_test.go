package daytonaproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/provider"

	"github.com/tether-run/tether/internal/intake"

	apiclient "github.com/daytonaio/daytona/libs/api-client-go"

	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider/daytona"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// Bounds of the waits in these tests: far above what the steps take, so
// only a real hang fails a test on a loaded machine.
const (
	waitBound = testutil.WaitBound
	// backstop is the auto-stop the proxy sets on a create that has it off.
	backstop = 17
	// secretKey is a runner key that must never reach a log or the journal.
	secretKey = "sk-runner-secret-4f9a1c"
	otherKey  = "sk-other-account-77e2"
	otherOrg  = "org-other"
	// vmSnapshot makes VM sandboxes, the class Daytona forks.
	vmSnapshot = "daytonaio/vm:test"
)

// world is one test's universe: a simulated Daytona (behind an optional
// wrapper), a journal, and the proxy in front of them.
type world struct {
	t        *testing.T
	sim      *daytonatest.Server
	upstream string // the real API URL the proxy forwards to
	j        *journal.Journal
	p        *Proxy
	url      string // the proxy's API URL, what a runner gets as DAYTONA_API_URL
	logs     *testutil.Buffer
	r        *reaper.Reaper // tether's reaper, told of the sandboxes the proxy's answers vouch for
}

// newWorld starts a simulator (wrapped by wrap, if given), a journal and a
// proxy whose own account is secretKey's.
func newWorld(t *testing.T, wrap func(http.Handler) http.Handler, opts ...daytonatest.Option) *world {
	t.Helper()
	w := &world{t: t, logs: &testutil.Buffer{}}
	opts = append([]daytonatest.Option{daytonatest.WithCreateDelay(time.Millisecond), daytonatest.WithDestroyDelay(5 * time.Millisecond),
		daytonatest.WithSnapshotClass(vmSnapshot, daytonatest.ClassLinuxVM)}, opts...)
	if wrap == nil {
		w.sim, _ = testutil.Daytona(t, opts...)
		w.upstream = w.sim.URL
	} else {
		w.sim = daytonatest.NewUnstartedServer(opts...)
		hs := httptest.NewServer(wrap(w.sim.Handler()))
		t.Cleanup(func() { w.sim.Close(); hs.Close() })
		w.upstream = hs.URL + "/api"
	}
	w.sim.AddKey(secretKey, daytonatest.DefaultOrg)
	w.sim.AddKey(otherKey, otherOrg)
	j, err := journal.Open(filepath.Join(t.TempDir(), "journal.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	w.j = j
	w.r = w.newReaper(daytona.Config{APIKey: secretKey, APIURL: w.upstream})
	w.p = &Proxy{
		Intake: &intake.Intake{Journal: j,
			Labels:   map[string]string{"scope": "unit"},
			Provider: "daytona",
			Logger:   slog.New(slog.NewTextHandler(w.logs, &slog.HandlerOptions{Level: slog.LevelDebug})), Accounts: map[string]string{"daytona": daytona.Fingerprint(w.upstream, secretKey)}},
		Upstream:        w.upstream,
		AutoStopMinutes: backstop,
		Vouch:           w.r.Vouch,
	}
	l, err := w.p.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.p.Serve(l) }()
	t.Cleanup(func() {
		w.p.Close()
		if err := testutil.Receive(t, "done", done); err != nil {
			t.Errorf("serve: %v", err)
		}
		// Whatever a test did: no credential in the logs or the journal.
		if strings.Contains(w.logs.String(), secretKey) || strings.Contains(w.logs.String(), otherKey) {
			t.Errorf("a runner's key reached the logs:\n%s", w.logs)
		}
		raw, err := os.ReadFile(j.Path())
		if err == nil && (bytes.Contains(raw, []byte(secretKey)) || bytes.Contains(raw, []byte(otherKey))) {
			t.Errorf("a runner's key reached the journal")
		}
	})
	w.url = w.p.URL(l)
	return w
}

// client is a runner's Daytona client: the real api-client-go, pointed at url.
func client(url, key string) *apiclient.APIClient {
	c := apiclient.NewConfiguration()
	c.Servers = apiclient.ServerConfigurations{{URL: url}}
	c.AddDefaultHeader("Authorization", "Bearer "+key)
	return apiclient.NewAPIClient(c)
}

// runner is a client through the proxy with tether's own key.
func (w *world) runner() *apiclient.APIClient { return client(w.url, secretKey) }

// reaper is tether's reaper over the same journal, with tether's key: the
// one the proxy vouches to, as in tether run.
func (w *world) reaper() *reaper.Reaper { return w.r }

// newReaper is a reaper over the world's journal with the credentials of cfg.
func (w *world) newReaper(cfg daytona.Config) *reaper.Reaper {
	prov, err := daytona.New(cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	return &reaper.Reaper{Journal: w.j, Providers: provider.NewSet(prov), PollInterval: 5 * time.Millisecond, RetryBase: 5 * time.Millisecond, ConfirmDelay: 10 * time.Millisecond}
}

// drain drains every live intent and returns the report.
func (w *world) drain() reaper.Report {
	w.t.Helper()
	live, err := w.j.Live()
	if err != nil {
		w.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	return w.reaper().Drain(ctx, live)
}

// observed waits for the one intent in the journal to hold a sandbox id
// (the proxy journals it while the runner reads its answer) and returns it.
func (w *world) observed() intent.Intent {
	w.t.Helper()
	var in intent.Intent
	testutil.Eventually(w.t, "the sandbox id is journaled", func() (bool, string) {
		in = w.only()
		return in.SandboxID != "", "intent is " + string(in.State)
	})
	return in
}

// only returns the one intent in the journal.
func (w *world) only() intent.Intent {
	w.t.Helper()
	all, err := w.j.All()
	if err != nil {
		w.t.Fatal(err)
	}
	if len(all) != 1 {
		w.t.Fatalf("journal holds %d intents, want 1: %+v", len(all), all)
	}
	return all[0]
}

// byName returns the simulator's sandbox (destroyed ones too) named name.
func (w *world) byName(name string) (daytonatest.Sandbox, bool) {
	for _, sb := range w.sim.Sandboxes() {
		if sb.Name == name || strings.HasPrefix(sb.Name, "DESTROYED_"+name+"_") {
			return sb, true
		}
	}
	return daytonatest.Sandbox{}, false
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), waitBound)
	t.Cleanup(cancel)
	return c
}

func TestCreateWithoutNameIsNamedLabelledBackstoppedAndJournaled(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	req := apiclient.NewCreateSandbox()
	req.SetLabels(map[string]string{"team": "a"})
	req.SetAutoStopInterval(0)
	sb, resp, err := w.runner().SandboxAPI.CreateSandbox(ctx(t)).CreateSandbox(*req).Execute()
	if err != nil {
		t.Fatalf("create through the proxy: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	in := w.observed()
	if in.State != intent.Observed || in.SandboxID != sb.GetId() {
		t.Fatalf("intent %+v: want observed with sandbox %s", in, sb.GetId())
	}
	if in.Name != intent.NamePrefix+in.ID {
		t.Errorf("intent name %q, want tether-<id>", in.Name)
	}
	if in.Account != w.p.Account() {
		t.Errorf("intent account %q, want tether's %q", in.Account, w.p.Account())
	}
	rec, ok := w.sim.Sandbox(sb.GetId())
	if !ok {
		t.Fatal("the simulator has no such sandbox")
	}
	if rec.Name != in.Name {
		t.Errorf("sandbox name %q, want %q", rec.Name, in.Name)
	}
	want := map[string]string{"team": "a", "scope": "unit", intent.LabelOwner: w.j.Owner(), intent.LabelIntent: in.ID}
	if !maps.Equal(rec.Labels, want) {
		t.Errorf("sandbox labels %v, want %v", rec.Labels, want)
	}
	if rec.AutoStopInterval != backstop {
		t.Errorf("auto-stop %d, want the backstop %d", rec.AutoStopInterval, backstop)
	}
	// The runner's answer is Daytona's, with the name and labels tether added.
	if sb.GetName() != in.Name || sb.GetLabels()["team"] != "a" || sb.GetLabels()[intent.LabelIntent] != in.ID {
		t.Errorf("answer name %q labels %v", sb.GetName(), sb.GetLabels())
	}
}

func TestRunnersOwnNameAndLabelsAreKeptBesideTethers(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	req := apiclient.NewCreateSandbox()
	req.SetName("agent-box-7")
	req.SetLabels(map[string]string{"team": "b", "job": "42"})
	req.SetAutoStopInterval(30)
	sb, _, err := w.runner().SandboxAPI.CreateSandbox(ctx(t)).CreateSandbox(*req).Execute()
	if err != nil {
		t.Fatal(err)
	}
	in := w.observed()
	if in.Name != "agent-box-7" {
		t.Errorf("journaled name %q, want the runner's", in.Name)
	}
	rec, _ := w.sim.Sandbox(sb.GetId())
	want := map[string]string{"team": "b", "job": "42", "scope": "unit", intent.LabelOwner: w.j.Owner(), intent.LabelIntent: in.ID}
	if rec.Name != "agent-box-7" || !maps.Equal(rec.Labels, want) {
		t.Errorf("sandbox %q labels %v, want agent-box-7 with %v", rec.Name, rec.Labels, want)
	}
	if rec.AutoStopInterval != 30 {
		t.Errorf("auto-stop %d: the runner's 30 must stay", rec.AutoStopInterval)
	}
	// The drain deletes it by its journaled id, verifying the runner's name.
	rep := w.drain()
	if rep.Gone != 1 || rep.Live() != 0 {
		t.Fatalf("drain: %+v", rep)
	}
	if rec, _ := w.sim.Sandbox(sb.GetId()); rec.State != "destroyed" {
		t.Errorf("sandbox %s after the drain: %s", sb.GetId(), rec.State)
	}
}

func TestAbsentAutoStopIsLeftToTheServerDefault(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	sb, _, err := w.runner().SandboxAPI.CreateSandbox(ctx(t)).CreateSandbox(*apiclient.NewCreateSandbox()).Execute()
	if err != nil {
		t.Fatal(err)
	}
	if rec, _ := w.sim.Sandbox(sb.GetId()); rec.AutoStopInterval != 15 {
		t.Errorf("auto-stop %d, want the server default 15", rec.AutoStopInterval)
	}
}

// A create whose runner hangs up (its SDK timed out) is not cancelled:
// the proxy reads the answer to its end and journals the id.
func TestRunnerHangsUpBeforeTheAnswer(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil, daytonatest.WithFaults(daytonatest.Faults{Latency: 2 * time.Second, Routes: []string{daytonatest.RouteCreate}}))
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, _, err := w.runner().SandboxAPI.CreateSandbox(short).CreateSandbox(*apiclient.NewCreateSandbox()).Execute()
	if err == nil {
		t.Fatal("the runner's create should have timed out first")
	}
	in := w.observed()
	rec, ok := w.sim.Sandbox(in.SandboxID)
	if !ok || rec.Name != in.Name {
		t.Fatalf("journaled sandbox %s: %+v", in.SandboxID, rec)
	}
	if rep := w.drain(); rep.Gone != 1 {
		t.Fatalf("drain: %+v", rep)
	}
	if rec, _ := w.sim.Sandbox(in.SandboxID); rec.State != "destroyed" {
		t.Errorf("sandbox after the drain: %s", rec.State)
	}
}

// Creates Daytona answered with an error although the sandbox exists: the
// intent stays pending under its name, and the drain finds and deletes it.
func TestFailedCreatesThatLandedEndDeleted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
	}{
		{"400 failed to start but exists", http.StatusBadRequest},
		{"500 after the allocation", http.StatusInternalServerError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, nil)
			w.sim.Inject(daytonatest.RouteCreate, 1, daytonatest.Scripted{Status: tc.status, After: true})
			_, resp, err := w.runner().SandboxAPI.CreateSandbox(ctx(t)).CreateSandbox(*apiclient.NewCreateSandbox()).Execute()
			if err == nil || resp == nil || resp.StatusCode != tc.status {
				t.Fatalf("the runner must see Daytona's %d, got %v (%v)", tc.status, resp, err)
			}
			in := w.only()
			if in.State != intent.Pending || in.SandboxID != "" {
				t.Fatalf("intent %+v: want pending without id", in)
			}
			sb, ok := w.byName(in.Name)
			if !ok {
				t.Fatal("the simulator should hold the sandbox the failed create allocated")
			}
			rep := w.drain()
			if rep.Gone != 1 || rep.Live() != 0 {
				t.Fatalf("drain: %+v", rep)
			}
			if rec, _ := w.sim.Sandbox(sb.ID); rec.State != "destroyed" || !rec.DeleteRequested {
				t.Errorf("sandbox after the drain: %+v", rec)
			}
		})
	}
}

// Refusals Daytona gives before it does anything close the intent at once
// as never-created, so the drain does not poll for a name that cannot come.
func TestRefusedBeforeAnythingIsNeverCreated(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	_, resp, err := client(w.url, "no-such-key").SandboxAPI.CreateSandbox(ctx(t)).CreateSandbox(*apiclient.NewCreateSandbox()).Execute()
	if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("want Daytona's 401, got %v (%v)", resp, err)
	}
	if in := w.only(); in.State != intent.NeverCreated {
		t.Fatalf("intent %+v: want never-created", in)
	}
	if n := len(w.sim.Sandboxes()); n != 0 {
		t.Fatalf("%d sandboxes", n)
	}
}

// A create or a fork Daytona answers 404 or 422, judged by what its API
// stores first (refused, create.go, citing apps/api/src/sandbox/ at
// v0.190.0): every 404 comes before anything is stored, so the intent
// closes at once as never-created, and the drain does not poll for a name
// that cannot come; a fork's 422 (a parent that cannot be forked) too. A
// create's 422 is raised by nothing on its path: it came from something in
// front of Daytona, and the intent stays pending for the drain to look up
// by name. In every case the simulator made nothing.
func TestCreateAndForkAnswered404Or422(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		kind   string
		status int
		closed bool
	}{
		{kindCreate, http.StatusNotFound, true},
		{kindCreate, http.StatusUnprocessableEntity, false},
		{kindFork, http.StatusNotFound, true},
		{kindFork, http.StatusUnprocessableEntity, true},
	} {
		t.Run(fmt.Sprintf("%s %d", tc.kind, tc.status), func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, nil)
			var parent intent.Intent
			var err error
			var resp *http.Response
			if tc.kind == kindFork {
				parent = w.intentOf(w.create("", -1))
				w.sim.FailNext(daytonatest.RouteFork, tc.status, 1)
				_, resp, err = w.runner().SandboxAPI.ForkSandbox(ctx(t), parent.SandboxID).ForkSandbox(*apiclient.NewForkSandbox()).Execute()
			} else {
				w.sim.FailNext(daytonatest.RouteCreate, tc.status, 1)
				_, resp, err = w.runner().SandboxAPI.CreateSandbox(ctx(t)).CreateSandbox(*apiclient.NewCreateSandbox()).Execute()
			}
			if err == nil || resp == nil || resp.StatusCode != tc.status {
				t.Fatalf("the runner must see Daytona's %d, got %v (%v)", tc.status, resp, err)
			}
			all, err := w.j.All()
			if err != nil {
				t.Fatal(err)
			}
			var refused []intent.Intent
			for _, in := range all {
				if in.ID != parent.ID {
					refused = append(refused, in)
				}
			}
			if len(refused) != 1 {
				t.Fatalf("%d intents for the %s, want 1: %+v", len(refused), tc.kind, refused)
			}
			in := refused[0]
			want := intent.Pending
			if tc.closed {
				want = intent.NeverCreated
			}
			if in.State != want || in.SandboxID != "" {
				t.Fatalf("intent of the %s answered %d is %s (%q): want %s", tc.kind, tc.status, in.State, in.LastError, want)
			}
			if tc.closed && !strings.Contains(in.LastError, fmt.Sprintf("refused the %s with %d", tc.kind, tc.status)) {
				t.Errorf("the closed intent does not say why: %q", in.LastError)
			}
			if _, ok := w.byName(in.Name); ok {
				t.Fatalf("the simulator holds a sandbox named %s", in.Name)
			}
			if n, made := len(w.sim.Sandboxes()), map[bool]int{true: 1, false: 0}[tc.kind == kindFork]; n != made {
				t.Errorf("%d sandboxes in the simulator, want %d", n, made)
			}
		})
	}
}

func TestDeleteByTheRunnerMarksReleasingAndIsNotDeletedTwice(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	c := w.runner()
	var ids []string
	for range 3 {
		sb, _, err := c.SandboxAPI.CreateSandbox(ctx(t)).CreateSandbox(*apiclient.NewCreateSandbox()).Execute()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.GetId())
	}
	testutil.Eventually(t, "every id is journaled", func() (bool, string) {
		all, _ := w.j.All()
		for _, in := range all {
			if in.SandboxID == "" {
				return false, in.Name + " has no id yet"
			}
		}
		return len(all) == 3, "intents missing"
	})
	// One by id, one by name.
	if _, _, err := c.SandboxAPI.DeleteSandbox(ctx(t), ids[0]).Execute(); err != nil {
		t.Fatal(err)
	}
	rec1, _ := w.sim.Sandbox(ids[1])
	if _, _, err := c.SandboxAPI.DeleteSandbox(ctx(t), rec1.Name).Execute(); err != nil {
		t.Fatal(err)
	}
	all, _ := w.j.All()
	states := map[string]intent.State{}
	for _, in := range all {
		states[in.SandboxID] = in.State
	}
	if states[ids[0]] != intent.Releasing || states[ids[1]] != intent.Releasing || states[ids[2]] != intent.Observed {
		t.Fatalf("states %v: want the two deleted releasing, the third observed", states)
	}
	rep := w.drain()
	if rep.Gone != 3 || rep.Live() != 0 {
		t.Fatalf("drain: %+v", rep)
	}
	if n := w.sim.Calls()[daytonatest.RouteDelete]; n != 3 {
		t.Errorf("%d deletes reached Daytona, want 3 (2 by the runner, 1 by the drain)", n)
	}
	for _, id := range ids {
		if rec, _ := w.sim.Sandbox(id); rec.State != "destroyed" {
			t.Errorf("sandbox %s: %s", id, rec.State)
		}
	}
}

// A runner's delete Daytona refuses (409: a state change in progress, as
// its handler answers) deleted nothing: the intent stays observed — not
// releasing, which would stop lease mode's renewals of a sandbox that lives
// on — and the sandbox is still there, by the simulator's record; the
// drain deletes it.
func TestRefusedDeleteByTheRunnerLeavesTheIntentObserved(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	c := w.runner()
	sb, _, err := c.SandboxAPI.CreateSandbox(ctx(t)).CreateSandbox(*apiclient.NewCreateSandbox()).Execute()
	if err != nil {
		t.Fatal(err)
	}
	in := w.observed()
	for _, status := range []int{http.StatusConflict, http.StatusBadRequest} {
		w.sim.FailNext(daytonatest.RouteDelete, status, 1)
		if _, resp, err := c.SandboxAPI.DeleteSandbox(ctx(t), sb.GetId()).Execute(); err == nil || resp == nil || resp.StatusCode != status {
			t.Fatalf("the runner's delete: want Daytona's %d, got %v (%v)", status, resp, err)
		}
		if got, _ := w.j.Get(in.ID); got.State != intent.Observed || got.SandboxID != sb.GetId() {
			t.Fatalf("after a delete refused %d the intent is %s on %q, want observed on %s", status, got.State, got.SandboxID, sb.GetId())
		}
	}
	if rec, _ := w.sim.Sandbox(sb.GetId()); rec.State != "started" || rec.DeleteRequested {
		t.Fatalf("sandbox after the refused deletes: %s (delete requested %v), want started", rec.State, rec.DeleteRequested)
	}
	if rep := w.drain(); rep.Gone != 1 || rep.Live() != 0 {
		t.Fatalf("drain: %+v", rep)
	}
	if rec, _ := w.sim.Sandbox(sb.GetId()); !rec.DeleteRequested {
		t.Errorf("sandbox left after the drain: %+v", rec)
	}
}

// A runner under another account deletes, by name, a sandbox of its own
// that tether never saw (another organization may use the same name) while
// tether holds a pending intent of that name: the delete is not the
// intent's. The intent stays pending, learns no id, and the other
// account's sandbox is the one deleted.
func TestAnotherAccountsDeleteOfTheSameNameLeavesTheIntent(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	ours, _, err := w.j.Create(ctx(t), intent.Declaration{Name: "job-1", Provider: "daytona", Account: w.p.Account(), Labels: map[string]string{"scope": "unit"}})
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := w.sim.AddSandbox(otherOrg, daytonatest.SeedSandbox{Name: "job-1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := client(w.url, otherKey).SandboxAPI.DeleteSandbox(ctx(t), "job-1").Execute(); err != nil {
		t.Fatalf("the other account's delete: %v", err)
	}
	if rec, _ := w.sim.Sandbox(theirs.ID); !rec.DeleteRequested {
		t.Fatalf("the other account's sandbox was not deleted: %+v", rec)
	}
	if got, _ := w.j.Get(ours.ID); got.State != intent.Pending || got.SandboxID != "" {
		t.Fatalf("tether's intent of the same name after another account's delete: %s on %q, want pending without id", got.State, got.SandboxID)
	}
}

// A runner with another account's key: its intents carry that account,
// the drain never deletes them (nor anything else), and it is reported.
func TestAnotherAccountIsReportedAndNeverDeleted(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	sb, _, err := client(w.url, otherKey).SandboxAPI.CreateSandbox(ctx(t)).CreateSandbox(*apiclient.NewCreateSandbox()).Execute()
	if err != nil {
		t.Fatal(err)
	}
	in := w.observed()
	if in.Account != daytona.Fingerprint(w.upstream, otherKey) || in.Account == w.p.Account() {
		t.Fatalf("intent account %q: want the runner's", in.Account)
	}
	if !strings.Contains(w.logs.String(), "another Daytona account") {
		t.Errorf("no report of the other account in the logs:\n%s", w.logs)
	}
	rep := w.drain()
	if rep.Live() != 1 || !strings.Contains(rep.Unresolved[0].LastError, "another provider account") {
		t.Fatalf("drain: %+v", rep)
	}
	if rec, _ := w.sim.Sandbox(sb.GetId()); rec.DeleteRequested || rec.Org != otherOrg {
		t.Errorf("the other account's sandbox was touched: %+v", rec)
	}
	if n := w.sim.Calls()[daytonatest.RouteDelete]; n != 0 {
		t.Errorf("%d deletes", n)
	}
}

// A create the runner declared itself (tether's name and labels) goes
// through untouched, and nothing more is journaled: the runner answers for
// it over the socket, as it did without the proxy.
func TestDeclaredCreatePassesUntouched(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	in, _, err := w.j.Create(ctx(t), intent.Declaration{Labels: map[string]string{"run": "1"}, Provider: "daytona"})
	if err != nil {
		t.Fatal(err)
	}
	req := apiclient.NewCreateSandbox()
	req.SetName(in.Name)
	req.SetLabels(in.Labels)
	req.SetAutoStopInterval(0)
	sb, _, err := w.runner().SandboxAPI.CreateSandbox(ctx(t)).CreateSandbox(*req).Execute()
	if err != nil {
		t.Fatal(err)
	}
	if got := w.only(); got.ID != in.ID || got.State != intent.Pending {
		t.Fatalf("journal %+v: want only the declared intent, as it was", got)
	}
	rec, _ := w.sim.Sandbox(sb.GetId())
	if rec.Name != in.Name || !maps.Equal(rec.Labels, in.Labels) || rec.AutoStopInterval != 0 {
		t.Errorf("declared create changed: name %q labels %v auto-stop %d", rec.Name, rec.Labels, rec.AutoStopInterval)
	}
}

func TestBadCreateBodiesAreRefusedBeforeAnything(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	for _, body := range []string{`[]`, `null`, `{"name":5}`, `{"labels":{"a":1}}`, `{`, "{\"name\":\"a\x01b\"}"} {
		resp, err := http.Post(w.url+"/sandbox", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("body %q: status %d, want 400", body, resp.StatusCode)
		}
	}
	if all, _ := w.j.All(); len(all) != 0 {
		t.Errorf("%d intents journaled for refused bodies", len(all))
	}
	if n := w.sim.Calls()[daytonatest.RouteCreate]; n != 0 {
		t.Errorf("%d creates reached Daytona", n)
	}
}

// A Daytona that cannot be reached is met as without tether: the runner's
// connection fails (no HTTP answer an SDK would not retry), and a create
// whose dial failed is closed at once: nothing was sent.
func TestUpstreamDownIsAConnectionError(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	w.sim.Close()
	_, resp, err := w.runner().SandboxAPI.CreateSandbox(ctx(t)).CreateSandbox(*apiclient.NewCreateSandbox()).Execute()
	if err == nil || resp != nil {
		t.Fatalf("create: want a connection error and no answer, got %v (%v)", resp, err)
	}
	if !isConnError(err) {
		t.Errorf("create: %v is not a connection error", err)
	}
	if in := w.only(); in.State != intent.NeverCreated || !strings.Contains(in.LastError, "nothing was sent") {
		t.Errorf("intent %+v: want never-created, nothing sent", in)
	}
	_, resp, err = w.runner().SandboxAPI.ListSandboxes(ctx(t)).Execute()
	if err == nil || resp != nil || !isConnError(err) {
		t.Fatalf("list: want a connection error and no answer, got %v (%v)", resp, err)
	}
}

// isConnError reports whether err is a failed connection (reset or closed
// before an answer), what a client meets from an unreachable server.
func isConnError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// Close (the actor's interrupt) returns at once even while a create waits
// for Daytona, and Serve then returns; the intent stays for the drain.
func TestCloseDoesNotWaitForCreatesInFlight(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	w.sim.Inject(daytonatest.RouteCreate, 1, daytonatest.Scripted{Hang: true})
	errc := make(chan error, 1)
	go func() {
		_, _, err := w.runner().SandboxAPI.CreateSandbox(context.Background()).CreateSandbox(*apiclient.NewCreateSandbox()).Execute()
		errc <- err
	}()
	testutil.Eventually(t, "the create reaches Daytona", func() (bool, string) {
		return w.sim.Calls()[daytonatest.RouteCreate] == 1, "not yet"
	})
	w.p.Close()
	if err := testutil.Receive(t, "errc", errc); err == nil {
		t.Fatal("the runner's create should fail when the proxy closes under it")
	}
	if in := w.only(); in.State != intent.Pending {
		t.Errorf("intent %+v: want pending, for the drain", in)
	}
}

// A runner that deletes its sandbox the moment the create answers: the
// proxy already knows the id, so the intent is releasing, not left to a
// lookup by a name Daytona has just renamed away.
func TestDeleteRightAfterCreate(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	c := w.runner()
	sb, _, err := c.SandboxAPI.CreateSandbox(ctx(t)).CreateSandbox(*apiclient.NewCreateSandbox()).Execute()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.SandboxAPI.DeleteSandbox(ctx(t), sb.GetId()).Execute(); err != nil {
		t.Fatal(err)
	}
	in := w.observed()
	if in.State != intent.Releasing || in.SandboxID != sb.GetId() {
		t.Fatalf("intent %+v: want releasing with sandbox %s", in, sb.GetId())
	}
	if rep := w.drain(); rep.Gone != 1 {
		t.Fatalf("drain: %+v", rep)
	}
	if n := w.sim.Calls()[daytonatest.RouteDelete]; n != 1 {
		t.Errorf("%d deletes, want the runner's one", n)
	}
}

func TestChildURLMirrorsTheUpstreamPath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ upstream, path string }{
		{"https://app.daytona.io/api", "/api"},
		{"https://app.daytona.io/api/", "/api"},
		{"http://daytona.internal:3000", ""},
		{"", "/api"}, // Daytona's cloud
	} {
		p := &Proxy{Upstream: tc.upstream}
		l, err := p.Listen("127.0.0.1:0")
		if err != nil {
			t.Fatalf("%q: %v", tc.upstream, err)
		}
		// The run's secret comes first (apiproxy), then the upstream's path.
		got := p.URL(l)
		secret, path, _ := strings.Cut(strings.TrimPrefix(got, "http://"+l.Addr().String()+"/"), "/")
		if len(secret) != 32 || !strings.HasPrefix(got, "http://"+l.Addr().String()+"/") || strings.TrimSuffix("/"+path, "/") != tc.path {
			t.Errorf("%q: child URL %s, want http://%s/<secret>%s", tc.upstream, got, l.Addr(), tc.path)
		}
		if shown := p.ShownURL(l); strings.Contains(shown, secret) || shown != "http://"+l.Addr().String()+"/<secret>"+tc.path {
			t.Errorf("%q: shown URL %s", tc.upstream, shown)
		}
		l.Close()
	}
	for _, bad := range []string{"ftp://host/api", "app.daytona.io/api", "https://user:hunter2@host/api", "http://%zz"} {
		_, err := (&Proxy{Upstream: bad}).Listen("127.0.0.1:0")
		if err == nil {
			t.Errorf("upstream %q accepted", bad)
		} else if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("error shows the password: %v", err)
		}
	}
}
