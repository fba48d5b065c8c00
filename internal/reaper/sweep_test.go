package reaper_test

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/daytona"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// sweepKind is one kind of sandbox the sweep test plants, and whether the
// sweep must delete it.
type sweepKind struct {
	name   string
	delete bool
}

var sweepKinds = []sweepKind{
	{"stale", true},
	{"other-owner", false},
	{"no-owner", false},
	{"stale", true},
	{"keep", false},
	{"recently-active", false},
	{"errored", true},
	{"errored-deleted", false}, // its delete was accepted already: listed, never asked again
	{"other-scope", false},
	{"stale", true},
	{"keep-no", true}, // labelled tether-keep, but not to keep
}

func TestSweep(t *testing.T) {
	t.Parallel()
	const (
		ownerA, ownerB = "01aaaaaaaaaaaaaaaaaaaaaaaa", "01bbbbbbbbbbbbbbbbbbbbbbbb"
		old            = 260 // planted 2 days ago, one minute apart: over two list pages
		young          = 300 // a third page
	)
	var offset atomic.Int64 // the simulated clock's distance from the wall clock
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	srv, _ := testutil.Daytona(t, daytonatest.WithClock(clock))
	srv.AddKey(apiKey, daytonatest.DefaultOrg)
	srv.AddKey("other-team", "org-2")
	logs := &testutil.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	prov := testutil.DaytonaProvider(t, srv, func(c *daytona.Config) { c.APIKey, c.Logger = apiKey, log })

	want := map[string]bool{} // sandbox id → the sweep must delete it
	var touch []string
	// Each sandbox has its own intent label, as tether's do: the sweep's
	// per-sandbox lists (by the sandbox's labels) then find one sandbox
	// each, as against Daytona, not all of them.
	n := 0
	scope := func(owner string) map[string]string {
		n++
		return map[string]string{intent.LabelOwner: owner, intent.LabelIntent: fmt.Sprintf("x%d", n), "env": "ci"}
	}
	for i := 0; i < old; i++ {
		offset.Store(int64(-48*time.Hour + time.Duration(i)*time.Minute))
		k := sweepKinds[i%len(sweepKinds)]
		seed := daytonatest.SeedSandbox{Name: fmt.Sprintf("tether-%s-%d", k.name, i), Labels: scope(ownerA)}
		switch k.name {
		case "other-owner":
			seed.Labels = scope(ownerB)
		case "no-owner":
			seed.Labels = map[string]string{"env": "ci", "team": "runner"}
		case "keep":
			// As people write it.
			seed.Labels[reaper.LabelKeep] = []string{"true", "True", "1", "yes", " YES "}[i/len(sweepKinds)%5]
		case "keep-no":
			seed.Labels[reaper.LabelKeep] = []string{"false", "no", "0", ""}[i/len(sweepKinds)%4]
		case "errored", "errored-deleted":
			seed.State, seed.ErrorReason = "error", "runner lost"
		case "other-scope":
			seed.Labels["env"] = "prod"
		}
		sb, err := srv.AddSandbox(daytonatest.DefaultOrg, seed)
		if err != nil {
			t.Fatal(err)
		}
		want[sb.ID] = k.delete
		switch k.name {
		case "errored-deleted":
			if err := prov.Delete(t.Context(), sb.ID); err != nil {
				t.Fatal(err)
			}
			// Daytona leaves such a sandbox in error, delete accepted, and
			// answers 404 for it; it shows up only with includeErroredDeleted.
			if err := srv.Hold(sb.ID, "error", 0); err != nil {
				t.Fatal(err)
			}
		case "recently-active":
			touch = append(touch, sb.ID)
		}
	}
	// Another organization's stale sandbox, with our owner label: not this account's.
	offset.Store(int64(-48 * time.Hour))
	foreign, err := srv.AddSandbox("org-2", daytonatest.SeedSandbox{Name: "tether-elsewhere", Labels: scope(ownerA)})
	if err != nil {
		t.Fatal(err)
	}
	offset.Store(int64(-30 * time.Minute))
	for i := 0; i < young; i++ {
		sb, err := srv.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Name: fmt.Sprintf("tether-young-%d", i), Labels: scope(ownerA)})
		if err != nil {
			t.Fatal(err)
		}
		want[sb.ID] = false
	}
	offset.Store(int64(-10 * time.Minute))
	for _, id := range touch {
		if err := srv.Touch(id); err != nil {
			t.Fatal(err)
		}
	}
	offset.Store(0)

	r := &reaper.Reaper{
		Providers: provider.NewSet(prov), Logger: log, Now: clock, Concurrency: 4,
		RetryBase: 10 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		PollInterval: 10 * time.Millisecond, PollMax: 100 * time.Millisecond,
	}
	rule := reaper.SweepRule{Owner: ownerA, Labels: map[string]string{"env": "ci"}, OlderThan: 24 * time.Hour, IdleFor: time.Hour}
	wantDeleted := 0
	for _, d := range want {
		if d {
			wantDeleted++
		}
	}

	// The dry run: says what it would delete and why, deletes nothing.
	deletesBefore := srv.Calls()[daytonatest.RouteDelete]
	rep, err := r.Sweep(t.Context(), rule, false)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Pages < 3 {
		t.Fatalf("listed %d pages, want the test to span at least 3", rep.Pages)
	}
	if got := rep.Count(reaper.SweepDelete); got != wantDeleted {
		t.Fatalf("dry run marks %d to delete, want %d", got, wantDeleted)
	}
	for _, it := range rep.Items {
		if it.Action == reaper.SweepDelete && !want[it.ID] || it.Action != reaper.SweepDelete && want[it.ID] {
			t.Errorf("dry run: %s %s: %s (%s)", it.Name, it.ID, it.Action, it.Reason)
		}
		if it.Reason == "" {
			t.Errorf("%s: no reason given", it.Name)
		}
	}
	// Sandboxes deleted while errored are listed (includeErroredDeleted)
	// and left alone: Daytona has accepted their delete.
	erroredDeleted := 0
	for i := 0; i < old; i++ {
		if sweepKinds[i%len(sweepKinds)].name == "errored-deleted" {
			erroredDeleted++
		}
	}
	if got := rep.Count(reaper.SweepInProgress); got != erroredDeleted {
		t.Fatalf("%d sandboxes shown as already being deleted, want the %d deleted while errored", got, erroredDeleted)
	}
	// The owner and scope labels are filtered by the server: another owner's
	// and unowned sandboxes are not even listed.
	if rep.NotOurs != 0 || rep.OtherOwner != 0 {
		t.Fatalf("not ours %d, other owner %d listed despite the label filter", rep.NotOurs, rep.OtherOwner)
	}
	if n := srv.Calls()[daytonatest.RouteDelete]; n != deletesBefore {
		t.Fatalf("the dry run sent %d deletes", n-deletesBefore)
	}
	for _, sb := range srv.Sandboxes() {
		if sb.DeleteRequested && !errored(sb) {
			t.Fatalf("the dry run deleted %s", sb.Name)
		}
	}

	// The real sweep, under rate limits and server errors.
	srv.SetFaults(daytonatest.Faults{Seed: 7, Rate429: 0.05, Rate5xx: 0.05, RetryAfter: time.Second})
	rep, err = r.Sweep(t.Context(), rule, true)
	if err != nil {
		t.Fatalf("sweep: %v", err)
	}
	srv.SetFaults(daytonatest.Faults{})
	if got := rep.Count(reaper.SweepDeleted); got != wantDeleted {
		t.Fatalf("report says %d deleted, want %d", got, wantDeleted)
	}
	// The simulator's own record decides.
	for _, sb := range srv.Sandboxes() {
		if sb.Org != daytonatest.DefaultOrg {
			if sb.DeleteRequested {
				t.Errorf("%s of another organization was deleted", sb.Name)
			}
			continue
		}
		d, known := want[sb.ID]
		if !known {
			t.Fatalf("unknown sandbox %s", sb.Name)
		}
		switch {
		case d && (!sb.DeleteRequested || sb.State != "destroyed"):
			t.Errorf("stale %s (%s) not deleted: state %s", sb.Name, sb.ID, sb.State)
		case !d && sb.DeleteRequested && sb.Name != "" && !errored(sb):
			t.Errorf("%s (%s) was deleted but must not be", sb.Name, sb.ID)
		}
		if sb.DeleteRequested && errored(sb) {
			if n := srv.CallsFor(sb.ID)[daytonatest.RouteDelete]; n != 1 {
				t.Errorf("errored-deleted %s got %d deletes, want only the first", sb.ID, n)
			}
		}
	}
	if _, ok := srv.Sandbox(foreign.ID); !ok {
		t.Fatal("lost the other organization's sandbox")
	}

	// A second sweep finds nothing stale left.
	rep, err = r.Sweep(t.Context(), rule, true)
	if err != nil || rep.Count(reaper.SweepDeleted)+rep.Count(reaper.SweepDelete)+rep.Count(reaper.SweepFailed) != 0 {
		t.Fatalf("second sweep: %v, %d deleted", err, rep.Count(reaper.SweepDeleted))
	}
}

// errored reports a sandbox whose delete was accepted while it was errored:
// the test's "errored-deleted" kind.
func errored(sb daytonatest.Sandbox) bool {
	return sb.State == "error" && sb.DesiredState == "destroyed"
}

func TestSweepWithoutOwnerTakesEveryOwnerButNeverTheUnowned(t *testing.T) {
	t.Parallel()
	var offset atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	srv, _ := testutil.Daytona(t, daytonatest.WithClock(clock))
	srv.AddKey(apiKey, daytonatest.DefaultOrg)
	prov := testutil.DaytonaProvider(t, srv, func(c *daytona.Config) { c.APIKey = apiKey })
	offset.Store(int64(-72 * time.Hour))
	a, _ := srv.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Labels: map[string]string{intent.LabelOwner: "01a"}})
	b, _ := srv.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Labels: map[string]string{intent.LabelOwner: "01b"}})
	none, _ := srv.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Labels: map[string]string{"tether-owner-ish": "01a"}})
	empty, _ := srv.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Labels: map[string]string{intent.LabelOwner: ""}})
	offset.Store(0)
	r := &reaper.Reaper{Providers: provider.NewSet(prov), Now: clock, PollInterval: 10 * time.Millisecond}
	rep, err := r.Sweep(t.Context(), reaper.SweepRule{OlderThan: time.Hour, IdleFor: time.Hour}, true)
	if err != nil {
		t.Fatal(err)
	}
	if rep.NotOurs != 2 || rep.Count(reaper.SweepDeleted) != 2 {
		t.Fatalf("not ours %d, deleted %d: %+v", rep.NotOurs, rep.Count(reaper.SweepDeleted), rep.Items)
	}
	for _, id := range []string{a.ID, b.ID} {
		if sb, _ := srv.Sandbox(id); !sb.DeleteRequested {
			t.Errorf("%s not deleted", id)
		}
	}
	for _, id := range []string{none.ID, empty.ID} {
		if sb, _ := srv.Sandbox(id); sb.DeleteRequested {
			t.Errorf("%s without an owner was deleted", id)
		}
	}
	if _, err := (&reaper.Reaper{}).Sweep(t.Context(), reaper.SweepRule{OlderThan: time.Hour, IdleFor: time.Hour}, false); !errors.Is(err, reaper.ErrNoProvider) {
		t.Fatalf("no provider: %v", err)
	}
}
