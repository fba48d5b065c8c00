package reaper_test

import (
	"context"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

func (w *world) drainCtx(timeout time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), timeout)
}

// live is the journal's live intent ids, sorted. Safe from any goroutine.
func (w *world) live() []string {
	w.t.Helper()
	live, err := w.j.Live()
	if err != nil {
		w.t.Error(err)
	}
	var ids []string
	for _, in := range live {
		ids = append(ids, in.ID)
	}
	sort.Strings(ids)
	return ids
}

// TestDrainWithFaultsConverges: a drain of many intents of every kind under
// 429s, 5xx and slow deletes ends with each in the state it must reach, and
// reports exactly the one it must leave live.
func TestDrainWithFaultsConverges(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.r.Concurrency = 16
	w.r.NeverCreatedHorizon = time.Nanosecond // absent names close at once here
	var (
		intents            []intent.Intent
		deleted, stopped   []string
		foreignSandbox     string
		wrongAccount       intent.Intent
		wrongAccountSbx    string
		neverCreatedIntent []string
	)
	for i := range 40 {
		in := w.intent(scope, intent.DrainDelete)
		sb := w.create(in)
		if i%2 == 0 {
			in = w.observe(in, sb.ID)
		}
		intents, deleted = append(intents, in), append(deleted, sb.ID)
	}
	for range 5 {
		in := w.intent(scope, intent.DrainStop)
		sb := w.create(in)
		intents, stopped = append(intents, in), append(stopped, sb.ID)
	}
	for range 3 {
		in := w.intent(scope, intent.DrainDelete)
		intents, neverCreatedIntent = append(intents, in), append(neverCreatedIntent, in.ID)
	}
	{ // A sandbox under our intent's name, but another run's labels.
		in := w.intent(scope, intent.DrainDelete)
		labels := map[string]string{intent.LabelOwner: "another-owner", intent.LabelIntent: in.ID, "team": "alpha", "run": "r1"}
		foreignSandbox = w.createAs(in.Name, labels, nil).ID
		intents = append(intents, in)
	}
	{ // Declared under other credentials.
		in, _, err := w.j.Create(context.Background(), intent.Declaration{Labels: scope, Provider: "daytona", Account: "daytona:another-account"})
		if err != nil {
			t.Fatal(err)
		}
		wrongAccountSbx = w.create(in).ID
		wrongAccount = w.observe(in, wrongAccountSbx)
		intents = append(intents, wrongAccount)
	}

	// Deleted sandboxes keep their old state up to 200 ms after the rename (issue 12).
	w.srv.SetFaults(daytonatest.Faults{Seed: 7, Rate429: 0.1, Rate5xx: 0.1, RetryAfter: time.Second, Destroying: 30 * time.Millisecond, DestroyLag: 200 * time.Millisecond})
	ctx, cancel := w.drainCtx(generous)
	defer cancel()
	rep := w.r.Drain(ctx, intents)

	if rep.Total != len(intents) || rep.Gone != 40 || rep.Stopped != 5 || rep.NeverCreated != 3 || len(rep.Foreign) != 1 || rep.Released != 0 {
		t.Fatalf("report: total %d gone %d stopped %d never-created %d foreign %d released %d",
			rep.Total, rep.Gone, rep.Stopped, rep.NeverCreated, len(rep.Foreign), rep.Released)
	}
	if rep.Live() != 1 || rep.Unresolved[0].ID != wrongAccount.ID || rep.Unresolved[0].SandboxID != wrongAccountSbx {
		t.Fatalf("unresolved %+v, want exactly %s", rep.Unresolved, wrongAccount.ID)
	}
	if got := w.live(); !slices.Equal(got, []string{wrongAccount.ID}) {
		t.Fatalf("journal's live intents %v, want only %s", got, wrongAccount.ID)
	}
	for _, id := range deleted {
		w.assertDestroyed(id)
	}
	for _, id := range stopped {
		if sb := w.sandbox(id); sb.State != "stopped" || sb.DeleteRequested || sb.Labels[provider.LabelKeep] != "true" || sb.Labels[intent.LabelOwner] == "" {
			t.Errorf("sandbox %s: %s, delete requested %v, labels %v; want stopped, labelled %s=true beside its own", id, sb.State, sb.DeleteRequested, sb.Labels, provider.LabelKeep)
		}
	}
	w.assertUntouched(foreignSandbox)
	w.assertUntouched(wrongAccountSbx)
	for _, id := range neverCreatedIntent {
		if got := w.journaled(id); got.State != intent.NeverCreated {
			t.Errorf("intent %s: %s, want never-created", id, got.State)
		}
	}

	var out strings.Builder
	rep.Write(&out)
	for _, want := range []string{"gone           40", "stopped        5", "never-created  3", "foreign        1", "unresolved     1",
		"unresolved " + wrongAccount.Name + " intent=" + wrongAccount.ID, "another provider account", "foreign tether-"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), apiKey) {
		t.Fatal("the API key appears in the report")
	}
	if c := w.srv.Calls(); c[daytonatest.RouteDelete] < 40 {
		t.Fatalf("only %d deletes for 40 sandboxes", c[daytonatest.RouteDelete])
	}
}

// TestDrainReportsExactlyWhatIsLeft: names that never appear keep a drain
// busy until its deadline; it then reports those, by name and id, and
// nothing else; and it says what it is doing meanwhile.
func TestDrainReportsExactlyWhatIsLeft(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.r.ProgressInterval = 50 * time.Millisecond
	var intents []intent.Intent
	var absent []string
	for i := range 10 {
		in := w.intent(scope, intent.DrainDelete)
		if i%2 == 0 {
			w.create(in)
		} else {
			absent = append(absent, in.ID)
		}
		intents = append(intents, in)
	}
	// The drain's end comes once the five that exist are gone and progress
	// was logged: what is left is then exactly the absent five.
	ctx, cancel := w.drainCtx(generous)
	defer cancel()
	go func() {
		if !testutil.Poll(func() bool {
			return len(w.live()) == len(absent) && strings.Contains(w.logs.String(), "drain in progress")
		}) {
			t.Error("timed out waiting for the five that exist to go")
		}
		cancel()
	}()
	rep := w.r.Drain(ctx, intents)
	if rep.Gone != 5 {
		t.Errorf("gone %d, want 5", rep.Gone)
	}
	var left []string
	for _, it := range rep.Unresolved {
		left = append(left, it.ID)
		if it.Name != intent.NamePrefix+it.ID || it.State != intent.Pending || !strings.Contains(it.LastError, "not found") {
			t.Errorf("unresolved item %+v", it)
		}
	}
	sort.Strings(left)
	if !slices.Equal(left, absent) || !slices.Equal(w.live(), absent) {
		t.Fatalf("left %v, journal live %v; want %v", left, w.live(), absent)
	}
	if !strings.Contains(w.logs.String(), "drain in progress") {
		t.Error("no progress was logged during a drain that lasted its whole deadline")
	}
}

// TestDrainOneHangStillResolvesOthers: one request that never answers holds
// its own intent only; every other intent is resolved.
func TestDrainOneHangStillResolvesOthers(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.r.Concurrency = 4
	w.r.CallTimeout = time.Hour // the hang is cut only by the drain's deadline
	var intents []intent.Intent
	for range 20 {
		in := w.intent(scope, intent.DrainDelete)
		intents = append(intents, w.observe(in, w.create(in).ID))
	}
	w.srv.Inject(daytonatest.RouteGet, 1, daytonatest.Scripted{Hang: true})
	ctx, cancel := w.drainCtx(generous)
	defer cancel()
	go func() {
		if !testutil.Poll(func() bool { return len(w.live()) == 1 }) {
			t.Error("timed out waiting for all but the hung one to go")
		}
		cancel()
	}()
	rep := w.r.Drain(ctx, intents)
	if rep.Gone != 19 || rep.Live() != 1 {
		t.Fatalf("gone %d, live %d; want 19 and 1", rep.Gone, rep.Live())
	}
	if it := rep.Unresolved[0]; !strings.Contains(it.LastError, "context canceled") {
		t.Errorf("hung intent's error %q does not say it ran out of time", it.LastError)
	}
}

// panicky is a provider whose Get panics for one sandbox: a bug in a backend
// must not abort the drain of the others.
type panicky struct {
	provider.Provider
	id string
}

func (p panicky) Get(ctx context.Context, id string) (provider.Sandbox, error) {
	if id == p.id {
		panic("backend bug")
	}
	return p.Provider.Get(ctx, id)
}

func TestDrainIsolatesAPanic(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	var intents []intent.Intent
	for range 5 {
		in := w.intent(scope, intent.DrainDelete)
		intents = append(intents, w.observe(in, w.create(in).ID))
	}
	w.r.Providers = provider.NewSet(panicky{Provider: w.spy, id: intents[2].SandboxID})
	ctx, cancel := w.drainCtx(generous)
	defer cancel()
	rep := w.r.Drain(ctx, intents)
	if rep.Gone != 4 || rep.Live() != 1 || rep.Unresolved[0].ID != intents[2].ID || !strings.Contains(rep.Unresolved[0].LastError, "panic") {
		t.Fatalf("gone %d, unresolved %+v", rep.Gone, rep.Unresolved)
	}
	// The intent's lock was released: it can be resolved again.
	w.r.Providers = provider.NewSet(w.spy)
	if out, err := w.resolve(intents[2], generous); err != nil || out.State != intent.Gone {
		t.Fatalf("after the panic: %s, %v", out.State, err)
	}
}

func TestDrainAfterTheDeadlineTriesNothing(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	in := w.intent(scope, intent.DrainDelete)
	in = w.observe(in, w.create(in).ID)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	before := sum(w.srv.Calls())
	rep := w.r.Drain(ctx, []intent.Intent{in})
	if rep.Live() != 1 || !strings.Contains(rep.Unresolved[0].LastError, "context canceled") {
		t.Fatalf("report %+v", rep)
	}
	if sum(w.srv.Calls()) != before {
		t.Fatal("calls were made after the deadline")
	}
}
