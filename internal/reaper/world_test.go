package reaper_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/testutil"

	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/daytona"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// apiKey is the credential every test world uses; no log line or error may
// ever contain it.
const apiKey = "dtn_SECRET_0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c"

// world is one test's universe: a simulated Daytona API, the real Daytona
// provider talking HTTP to it, a real bbolt journal, and a reaper over both,
// all logging into one buffer.
type world struct {
	t    *testing.T
	srv  *daytonatest.Server
	prov *daytona.Provider
	spy  *spy
	j    *journal.Journal
	r    *reaper.Reaper
	logs *testutil.Buffer
}

func newWorld(t *testing.T, opts ...daytonatest.Option) *world {
	t.Helper()
	srv, _ := testutil.Daytona(t, opts...)
	srv.AddKey(apiKey, daytonatest.DefaultOrg)
	logs := &testutil.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	prov := testutil.DaytonaProvider(t, srv, func(c *daytona.Config) { c.APIKey, c.Logger = apiKey, log })
	j, err := journal.Open(filepath.Join(t.TempDir(), "journal.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	w := &world{t: t, srv: srv, prov: prov, spy: &spy{Provider: prov}, j: j, logs: logs}
	w.r = &reaper.Reaper{
		Journal:         j,
		Providers:       provider.NewSet(w.spy),
		Logger:          log,
		AutoStopMinutes: 15,
		// Short waits keep the tests quick; the logic is the same.
		RetryBase:     10 * time.Millisecond,
		RetryMax:      200 * time.Millisecond,
		PollInterval:  10 * time.Millisecond,
		PollMax:       100 * time.Millisecond,
		LookupPollMax: 200 * time.Millisecond,
		// The simulator destroys in 5 ms by default; confirming 10 ms after
		// the delete finds the 404 with one read.
		ConfirmDelay: 10 * time.Millisecond,
		RecheckDelay: 10 * time.Millisecond,
	}
	t.Cleanup(func() { w.assertNoSecret() })
	return w
}

// assertNoSecret fails the test if the API key reached any log line.
func (w *world) assertNoSecret() {
	if strings.Contains(w.logs.String(), apiKey) {
		w.t.Errorf("the API key appears in the logs:\n%s", w.logs.String())
	}
}

// intent declares an intent as tether's API would: scope labels, this
// provider and this account.
func (w *world) intent(scope map[string]string, onDrain intent.OnDrain) intent.Intent {
	w.t.Helper()
	in, _, err := w.j.Create(context.Background(), intent.Declaration{
		Labels: scope, OnDrain: onDrain, Provider: w.prov.Name(), Account: w.prov.Account(),
	})
	if err != nil {
		w.t.Fatal(err)
	}
	return in
}

// create makes the intent's sandbox through the API, as a runner does:
// its exact name, a superset of its labels.
func (w *world) create(in intent.Intent) provider.Sandbox {
	w.t.Helper()
	labels := map[string]string{"runner": "test"}
	for k, v := range in.Labels {
		labels[k] = v
	}
	return w.createAs(in.Name, labels, nil)
}

func (w *world) createAs(name string, labels map[string]string, autoStop *int) provider.Sandbox {
	w.t.Helper()
	sb, err := w.prov.Create(context.Background(), name, labels, autoStop)
	if err != nil {
		w.t.Fatalf("create %s: %v", name, err)
	}
	return sb
}

func (w *world) observe(in intent.Intent, sandboxID string) intent.Intent {
	w.t.Helper()
	in, err := w.j.Observe(in.ID, sandboxID)
	if err != nil {
		w.t.Fatal(err)
	}
	return in
}

func (w *world) journaled(id string) intent.Intent {
	w.t.Helper()
	in, err := w.j.Get(id)
	if err != nil {
		w.t.Fatal(err)
	}
	return in
}

// sandbox is the simulator's own view of a sandbox, destroyed or not.
func (w *world) sandbox(id string) daytonatest.Sandbox {
	w.t.Helper()
	sb, ok := w.srv.Sandbox(id)
	if !ok {
		w.t.Fatalf("simulator has no sandbox %s", id)
	}
	return sb
}

// assertUntouched checks the simulator never got a delete or stop for id.
func (w *world) assertUntouched(id string) {
	w.t.Helper()
	sb := w.sandbox(id)
	if sb.DeleteRequested || sb.State != "started" {
		w.t.Errorf("sandbox %s (%s) was touched: state %s, delete requested %v", id, sb.Name, sb.State, sb.DeleteRequested)
	}
	if w.spy.deleted(id) || w.spy.stopped(id) {
		w.t.Errorf("the reaper asked to delete or stop sandbox %s", id)
	}
}

func (w *world) assertDestroyed(id string) {
	w.t.Helper()
	if sb := w.sandbox(id); sb.State != "destroyed" {
		w.t.Errorf("sandbox %s is %s, want destroyed", id, sb.State)
	}
}

// resolve runs Resolve under a deadline.
func (w *world) resolve(in intent.Intent, timeout time.Duration) (intent.Intent, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := w.r.Resolve(ctx, in)
	if err != nil && strings.Contains(err.Error(), apiKey) {
		w.t.Errorf("the API key appears in an error: %v", err)
	}
	return out, err
}

// spy is the real provider with the destructive calls recorded, and an
// optional hook run just before each delete reaches the API.
type spy struct {
	provider.Provider
	mu       sync.Mutex
	deletes  []call
	stops    []call
	onDelete func(id string)
}

type call struct {
	id       string
	at, done time.Time
	err      error
}

func (s *spy) Delete(ctx context.Context, id string) error {
	s.mu.Lock()
	hook := s.onDelete
	s.mu.Unlock()
	if hook != nil {
		hook(id)
	}
	c := call{id: id, at: time.Now()}
	c.err = s.Provider.Delete(ctx, id)
	c.done = time.Now()
	s.mu.Lock()
	s.deletes = append(s.deletes, c)
	s.mu.Unlock()
	return c.err
}

func (s *spy) Stop(ctx context.Context, id string) error {
	c := call{id: id, at: time.Now()}
	c.err = s.Provider.Stop(ctx, id)
	c.done = time.Now()
	s.mu.Lock()
	s.stops = append(s.stops, c)
	s.mu.Unlock()
	return c.err
}

// ExhaustedUntil passes the provider's quota hints through.
func (s *spy) ExhaustedUntil(kind string) time.Time {
	if t, ok := s.Provider.(provider.Throttled); ok {
		return t.ExhaustedUntil(kind)
	}
	return time.Time{}
}

// Quota passes the provider's quota names through.
func (s *spy) Quota(kind string) string {
	if q, ok := s.Provider.(provider.Quotas); ok {
		return q.Quota(kind)
	}
	return ""
}

// HandOff passes the provider's hand-off through.
func (s *spy) HandOff(ctx context.Context, id string, stop bool) (string, error) {
	if h, ok := s.Provider.(provider.HandOffer); ok {
		return h.HandOff(ctx, id, stop)
	}
	return "", provider.ErrNoHandOff
}

// SetLabels passes the provider's label replacement through.
func (s *spy) SetLabels(ctx context.Context, id string, labels map[string]string) error {
	return s.Provider.(provider.Labeler).SetLabels(ctx, id, labels)
}

func (s *spy) setOnDelete(f func(id string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onDelete = f
}

func (s *spy) deleteCalls() []call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]call(nil), s.deletes...)
}

func (s *spy) deleted(id string) bool {
	for _, c := range s.deleteCalls() {
		if c.id == id {
			return true
		}
	}
	return false
}

func (s *spy) stopped(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.stops {
		if c.id == id {
			return true
		}
	}
	return false
}

// resolveUntil runs Resolve and ends its context once cond holds, as a
// deadline would end it at that point; it returns what Resolve returned.
// Driving the end by a condition, not a clock, keeps the test exact on a
// loaded machine.
func (w *world) resolveUntil(in intent.Intent, what string, cond func() bool) (intent.Intent, error) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	type result struct {
		in  intent.Intent
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := w.r.Resolve(ctx, in)
		done <- result{out, err}
	}()
	testutil.WaitFor(w.t, what, func() bool {
		select {
		case res := <-done:
			done <- res
			return true // finished before the condition: the caller's checks say whether that is wrong
		default:
			return cond()
		}
	})
	cancel()
	res := testutil.Receive(w.t, "done", done)
	if res.err != nil && strings.Contains(res.err.Error(), apiKey) {
		w.t.Errorf("the API key appears in an error: %v", res.err)
	}
	return res.in, res.err
}
