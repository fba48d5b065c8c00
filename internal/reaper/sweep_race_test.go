package reaper_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apiclient "github.com/daytonaio/daytona/libs/api-client-go"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/daytona"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// between is a provider whose hooks run on the simulator between the sweep's
// list and its delete (before the fresh read), and right after the delete.
type between struct {
	*daytona.Provider
	mu           sync.Mutex
	beforeRead   func(id string)
	afterDelete  func(id string)
	readsStarted map[string]bool
}

func (b *between) Inspect(ctx context.Context, id string) (provider.Listed, error) {
	b.mu.Lock()
	first := b.readsStarted == nil || !b.readsStarted[id]
	if b.readsStarted == nil {
		b.readsStarted = map[string]bool{}
	}
	b.readsStarted[id] = true
	hook := b.beforeRead
	b.mu.Unlock()
	if first && hook != nil {
		hook(id)
	}
	return b.Provider.Inspect(ctx, id)
}

func (b *between) Delete(ctx context.Context, id string) error {
	err := b.Provider.Delete(ctx, id)
	if err == nil && b.afterDelete != nil {
		b.afterDelete(id)
	}
	return err
}

// sweepWorld plants stale sandboxes (created two days ago, idle since) and
// returns a reaper over b.
func sweepWorld(t *testing.T, n int) (*daytonatest.Server, *between, *reaper.Reaper, []daytonatest.Sandbox) {
	t.Helper()
	var offset atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	srv, _ := testutil.Daytona(t, daytonatest.WithClock(clock))
	srv.AddKey(apiKey, daytonatest.DefaultOrg)
	prov := testutil.DaytonaProvider(t, srv, func(c *daytona.Config) { c.APIKey = apiKey })
	offset.Store(int64(-48 * time.Hour))
	var sbs []daytonatest.Sandbox
	for range n {
		sb, err := srv.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Labels: map[string]string{intent.LabelOwner: "01a", intent.LabelIntent: "x"}})
		if err != nil {
			t.Fatal(err)
		}
		sbs = append(sbs, sb)
	}
	offset.Store(0)
	b := &between{Provider: prov}
	r := &reaper.Reaper{Providers: provider.NewSet(b), Now: clock, RetryBase: 10 * time.Millisecond, RetryMax: 100 * time.Millisecond,
		PollInterval: 10 * time.Millisecond, PollMax: 50 * time.Millisecond}
	return srv, b, r, sbs
}

var staleRule = reaper.SweepRule{OlderThan: time.Hour, IdleFor: time.Hour}

func TestSweepKeepsWhatChangedBetweenListAndDelete(t *testing.T) {
	t.Parallel()
	srv, b, r, sbs := sweepWorld(t, 3)
	active, keep, stale := sbs[0].ID, sbs[1].ID, sbs[2].ID
	b.beforeRead = func(id string) {
		switch id {
		case active:
			if err := srv.Touch(id); err != nil {
				t.Error(err)
			}
		case keep:
			// Labelled keep by someone else, through the API.
			cfg := apiclient.NewConfiguration()
			cfg.Servers = apiclient.ServerConfigurations{{URL: srv.URL}}
			c := apiclient.NewAPIClient(cfg)
			ctx := context.WithValue(t.Context(), apiclient.ContextAccessToken, apiKey)
			labels := map[string]string{intent.LabelOwner: "01a", intent.LabelIntent: "x", reaper.LabelKeep: "true"}
			if _, _, err := c.SandboxAPI.ReplaceLabels(ctx, id).SandboxLabels(*apiclient.NewSandboxLabels(labels)).Execute(); err != nil {
				t.Error(err)
			}
		}
	}
	rep, err := r.Sweep(t.Context(), staleRule, true)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{active: reaper.SweepChangedKeep, keep: reaper.SweepChangedKeep, stale: reaper.SweepDeleted}
	for _, it := range rep.Items {
		if it.Action != want[it.ID] {
			t.Errorf("%s: %s (%s), want %s", it.ID, it.Action, it.Reason, want[it.ID])
		}
	}
	// The simulator's record decides.
	for id, action := range want {
		sb, _ := srv.Sandbox(id)
		if deleted := srv.CallsFor(id)[daytonatest.RouteDelete] > 0; deleted != (action == reaper.SweepDeleted) || sb.DeleteRequested != deleted {
			t.Errorf("%s: %d deletes, delete requested %v, want deleted %v", id, srv.CallsFor(id)[daytonatest.RouteDelete], sb.DeleteRequested, action == reaper.SweepDeleted)
		}
	}
}

func TestSweepReportsDeletedOnlyWhenGone(t *testing.T) {
	t.Parallel()
	srv, b, r, sbs := sweepWorld(t, 2)
	destroying, errored := sbs[0].ID, sbs[1].ID
	b.afterDelete = func(id string) {
		state := "destroying" // held there: Daytona issue #3294
		if id == errored {
			state = "error" // the destroy action failed
		}
		if err := srv.Hold(id, state, 0); err != nil {
			t.Error(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Second) // room for a loaded machine; the destroying one holds until then
	defer cancel()
	rep, err := r.Sweep(ctx, staleRule, true)
	if !errors.Is(err, reaper.ErrSweepIncomplete) {
		t.Fatalf("sweep: %v, want incomplete", err)
	}
	for _, it := range rep.Items {
		if it.Action != reaper.SweepFailed {
			t.Errorf("%s: %s (%s), want failed", it.ID, it.Action, it.Reason)
		}
		if it.ID == errored && !strings.Contains(it.Reason, "ended in state error") {
			t.Errorf("errored: reason %q does not say the destroy ended in error", it.Reason)
		}
	}
	if sb, _ := srv.Sandbox(destroying); sb.State != "destroying" {
		t.Fatalf("the simulator shows %s, the test meant destroying", sb.State)
	}
	if sb, _ := srv.Sandbox(errored); sb.State != "error" || sb.DesiredState != "destroyed" {
		t.Fatalf("the simulator shows %s/%s, the test meant error/destroyed", sb.State, sb.DesiredState)
	}
}

func TestSweepFailsFastWhenNothingAnswers(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + "/api"
	ln.Close() // nothing listens there now: connection refused
	for _, u := range []string{url, "http://no-such-host.invalid/api"} {
		prov, err := daytona.New(daytona.Config{APIKey: apiKey, APIURL: u})
		if err != nil {
			t.Fatal(err)
		}
		r := &reaper.Reaper{Providers: provider.NewSet(prov)}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		start := time.Now()
		_, err = r.Sweep(ctx, staleRule, true)
		cancel()
		if !errors.Is(err, provider.ErrUnreachable) {
			t.Errorf("%s: %v, want unreachable", u, err)
		}
		// Retried to the deadline it would take the minute; failing fast
		// takes one call.
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("%s: took %s", u, d)
		}
	}
}
