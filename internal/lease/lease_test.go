package lease_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/lease"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/daytona"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// These tests run in a synctest bubble: the simulator's clock and the
// renewer's are the same fake clock, which moves only when every goroutine
// waits, so a lease of 2 real minutes (the default) is tested at the real
// server's pace in milliseconds, with no timing assumption about the
// machine. The simulator is served in memory (handlerTransport): a socket
// would keep the bubble's clock from moving.

const leaseMinutes = 2

// handlerTransport serves requests with h in the calling goroutine; spent,
// if set, counts the answers that said the authenticated quota is spent.
type handlerTransport struct {
	h     http.Handler
	spent *atomic.Int64
}

func (t handlerTransport) RoundTrip(req *http.Request) (resp *http.Response, err error) {
	defer func() {
		if p := recover(); p != nil {
			resp, err = nil, fmt.Errorf("simulator aborted the request: %v", p)
		}
	}()
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, req)
	if t.spent != nil && rec.Header().Get("X-RateLimit-Remaining-"+daytonatest.ThrottlerAuthenticated) == "0" {
		t.spent.Add(1)
	}
	return rec.Result(), nil
}

// journal is an in-memory lease.Journal.
type memJournal struct {
	mu      sync.Mutex
	intents map[string]intent.Intent
}

func (j *memJournal) Live() ([]intent.Intent, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []intent.Intent
	for _, in := range j.intents {
		if in.State.Live() {
			out = append(out, in)
		}
	}
	return out, nil
}

func (j *memJournal) Get(id string) (intent.Intent, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	in, ok := j.intents[id]
	if !ok {
		return in, journal.ErrNotFound
	}
	return in, nil
}

func (j *memJournal) set(id string, st intent.State) {
	j.mu.Lock()
	defer j.mu.Unlock()
	in := j.intents[id]
	in.State = st
	j.intents[id] = in
}

type recorder struct {
	mu     sync.Mutex
	atRisk int
}

func (o *recorder) LeaseAtRisk() { o.mu.Lock(); o.atRisk++; o.mu.Unlock() }
func (o *recorder) Leased(int)   {}

type world struct {
	sim      *daytonatest.Server
	prov     *daytona.Provider
	journal  *memJournal
	recorder *recorder
	ids      []string // sandbox ids, by intent "i<n>"
	spent    *atomic.Int64
}

// newWorld plants n started sandboxes with lease mode's settings (auto-stop
// and auto-delete leaseMinutes) and an observed intent for each.
func newWorld(t *testing.T, n int, opts ...daytonatest.Option) *world {
	t.Helper()
	return newWorldStop(t, n, leaseMinutes, opts...)
}

// newWorldStop is newWorld with another auto-stop interval.
func newWorldStop(t *testing.T, n, autoStop int, opts ...daytonatest.Option) *world {
	t.Helper()
	sim := daytonatest.NewUnstartedServer(append([]daytonatest.Option{daytonatest.WithMinute(time.Minute)}, opts...)...)
	spent := &atomic.Int64{}
	t.Cleanup(sim.Close)
	prov, err := daytona.New(daytona.Config{
		APIKey: daytonatest.DefaultKey, APIURL: "http://daytona.invalid/api",
		HTTPClient: &http.Client{Transport: handlerTransport{sim.Handler(), spent}},
		Logger:     slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	w := &world{sim: sim, prov: prov, journal: &memJournal{intents: map[string]intent.Intent{}}, recorder: &recorder{}, spent: spent}
	stop, del := autoStop, provider.LeaseAutoDelete(-1, leaseMinutes)
	for i := 0; i < n; i++ {
		sb, err := sim.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{
			Name: fmt.Sprintf("tether-i%d", i), AutoStopInterval: &stop, AutoDeleteInterval: &del,
			Labels: map[string]string{intent.LabelOwner: testOwner, intent.LabelIntent: fmt.Sprintf("i%d", i)},
		})
		if err != nil {
			t.Fatal(err)
		}
		id := fmt.Sprintf("i%d", i)
		w.journal.intents[id] = intent.Intent{ID: id, State: intent.Observed, SandboxID: sb.ID, Provider: daytona.ProviderName, Account: prov.Account(),
			Labels: map[string]string{intent.LabelOwner: testOwner, intent.LabelIntent: id}}
		w.ids = append(w.ids, sb.ID)
	}
	return w
}

// testOwner is the journal's owner the test sandboxes are labelled with.
const testOwner = "owner-lease-test"

func (w *world) renewer() *lease.Renewer {
	return &lease.Renewer{
		Journal: w.journal, Provider: w.prov, Lease: leaseMinutes * time.Minute,
		Recorder: w.recorder, Logger: slog.New(slog.DiscardHandler),
	}
}

// start runs r until stop, which returns when r stopped, with its error
// (each call).
func start(r *lease.Renewer) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	var err error
	return func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
}

// run runs the renewer for d of the fake clock and stops it; it returns
// when the renewer stopped.
func (w *world) run(t *testing.T, d time.Duration) time.Time {
	t.Helper()
	stop := start(w.renewer())
	time.Sleep(d)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	synctest.Wait()
	return time.Now()
}

// deleteElsewhere deletes sandbox id behind tether's back, as another
// client of the account would.
func (w *world) deleteElsewhere(t *testing.T, id string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodDelete, "http://daytona.invalid/api/sandbox/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+daytonatest.DefaultKey)
	if resp, err := (handlerTransport{h: w.sim.Handler()}).RoundTrip(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("delete: %v %v", resp, err)
	}
}

func (w *world) assertAlive(t *testing.T) {
	t.Helper()
	for _, id := range w.ids {
		sb, _ := w.sim.Sandbox(id)
		if sb.State != "started" || sb.DeleteRequested {
			t.Errorf("sandbox %s: %s (delete requested %v), want started", id, sb.State, sb.DeleteRequested)
		}
	}
	if ev := w.sim.TimerEvents(); len(ev) > 0 {
		t.Errorf("timers fired on renewed sandboxes: %+v", ev)
	}
}

// assertReaped: every sandbox stopped by the simulator's own timer at most
// a lease and one check (10 s) after the renewals stopped at `stopped`, and
// deleted by its auto-delete at most another lease and check later.
func (w *world) assertReaped(t *testing.T, stopped time.Time) {
	t.Helper()
	fired := map[string]map[string]daytonatest.TimerEvent{}
	for _, e := range w.sim.TimerEvents() {
		if fired[e.ID] == nil {
			fired[e.ID] = map[string]daytonatest.TimerEvent{}
		}
		fired[e.ID][e.Kind] = e
	}
	bound := leaseMinutes*time.Minute + 10*time.Second
	for _, id := range w.ids {
		sb, _ := w.sim.Sandbox(id)
		if sb.State != "destroyed" {
			t.Errorf("sandbox %s: %s, want destroyed", id, sb.State)
		}
		stop, ok := fired[id][daytonatest.TimerAutoStop]
		if !ok {
			t.Errorf("sandbox %s: no auto-stop fired (%+v)", id, fired[id])
			continue
		}
		if late := stop.At.Sub(stopped); late > bound {
			t.Errorf("sandbox %s stopped %s after the renewals stopped, more than the bound %s", id, late, bound)
		}
		del, ok := fired[id][daytonatest.TimerAutoDelete]
		if !ok {
			t.Errorf("sandbox %s: no auto-delete fired (%+v)", id, fired[id])
			continue
		}
		if late := del.At.Sub(stop.At); late > bound {
			t.Errorf("sandbox %s deleted %s after its stop, more than the bound %s", id, late, bound)
		}
	}
}

// A live runner holds its sandboxes for 10 leases: none is stopped; then
// tether is gone and every one is deleted within the lease plus a check.
func TestRenewedSandboxesLiveThenDieWithTether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 20)
		stopped := w.run(t, 10*leaseMinutes*time.Minute)
		w.assertAlive(t)
		calls := w.sim.Calls()[daytonatest.RouteLastActivity]
		perHour := float64(calls) / float64(len(w.ids)) / (10 * leaseMinutes / 60.0)
		t.Logf("%d renewals for %d sandboxes over %d minutes: %.0f per sandbox per hour", calls, len(w.ids), 10*leaseMinutes, perHour)

		time.Sleep(2 * (leaseMinutes*time.Minute + 20*time.Second))
		w.assertReaped(t, stopped)
	})
}

// 30% of the renewals answered 429: the renewer honours the Retry-After
// and still keeps every sandbox alive.
func TestRenewalsUnderRateLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 20, daytonatest.WithFaults(daytonatest.Faults{
			Seed: 7, Rate429: 0.3, Routes: []string{daytonatest.RouteLastActivity},
		}))
		w.run(t, 10*leaseMinutes*time.Minute)
		w.assertAlive(t)
		th := w.sim.Throttle()
		calls := w.sim.Calls()[daytonatest.RouteLastActivity]
		refused := th.Refused[daytonatest.ThrottlerAuthenticated]
		if refused < calls/5 {
			t.Fatalf("%d of %d renewals refused: the faults did not bite", refused, calls)
		}
		// Renewals sent inside a window a 429 announced: only those already
		// in flight when it came.
		if in := th.InWindow[daytonatest.ThrottlerAuthenticated]; in > refused {
			t.Errorf("%d renewals sent inside announced throttle windows (%d refused): Retry-After not honoured", in, refused)
		}
		t.Logf("%d renewals, %d refused, %d inside throttle windows", calls, refused, th.InWindow[daytonatest.ThrottlerAuthenticated])
	})
}

// Under a per-minute quota the renewals just fit in, the renewer holds back
// when an answer says the quota is spent (X-RateLimit-Remaining: 0), so
// almost nothing is refused, and every sandbox stays alive.
func TestRenewalsUnderAQuota(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 20 sandboxes renewed every 36 s on average: 33 a minute, against 34.
		w := newWorld(t, 20, daytonatest.WithRateLimit(daytonatest.ThrottlerAuthenticated, 34, time.Minute))
		w.run(t, 10*leaseMinutes*time.Minute)
		w.assertAlive(t)
		th := w.sim.Throttle()
		calls := w.sim.Calls()[daytonatest.RouteLastActivity]
		refused := th.Refused[daytonatest.ThrottlerAuthenticated]
		t.Logf("%d renewals, %d refused, %d answers said the quota was spent", calls, refused, w.spent.Load())
		if w.spent.Load() == 0 {
			t.Fatal("the quota was never spent: nothing to honour")
		}
		if refused > calls/20 {
			t.Errorf("%d of %d renewals refused: the spent quota was not honoured", refused, calls)
		}
	})
}

// A released intent's sandbox is not renewed again; the others are.
func TestReleasedIsNotRenewed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 2)
		stop := start(w.renewer())
		defer stop()
		time.Sleep(leaseMinutes * time.Minute)
		synctest.Wait()
		w.journal.set("i0", intent.Released)
		before := w.sim.CallsFor(w.ids[0])[daytonatest.RouteLastActivity]
		if before == 0 {
			t.Fatal("the sandbox was never renewed before its release")
		}
		time.Sleep(5 * leaseMinutes * time.Minute)
		stop()
		if after := w.sim.CallsFor(w.ids[0])[daytonatest.RouteLastActivity]; after != before {
			t.Errorf("released sandbox renewed %d more times after its release", after-before)
		}
		// Its lease ran out: the simulator stopped it, then deleted it
		// (lease mode's settings stay on a released sandbox).
		if sb, _ := w.sim.Sandbox(w.ids[0]); sb.State != "destroyed" {
			t.Errorf("released sandbox: %s, want destroyed by its lease", sb.State)
		}
		if sb, _ := w.sim.Sandbox(w.ids[1]); sb.State != "started" {
			t.Errorf("the other sandbox: %s, want started", sb.State)
		}
	})
}

// An intent released as kept is handed to Kept once; one released as
// deleted is not.
func TestKeptIsHandedBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 2)
		var mu sync.Mutex
		var kept []string
		r := w.renewer()
		r.Kept = func(in intent.Intent) { mu.Lock(); kept = append(kept, in.ID); mu.Unlock() }
		stop := start(r)
		time.Sleep(time.Minute)
		w.journal.mu.Lock()
		for id, out := range map[string]string{"i0": intent.OutcomeKept, "i1": intent.OutcomeDeleted} {
			in := w.journal.intents[id]
			in.State, in.Outcome = intent.Released, out
			w.journal.intents[id] = in
		}
		w.journal.mu.Unlock()
		time.Sleep(2 * time.Minute)
		stop()
		synctest.Wait()
		if len(kept) != 1 || kept[0] != "i0" {
			t.Fatalf("handed back %v, want [i0]", kept)
		}
	})
}

// Renewals that keep failing are reported once per sandbox.
func TestFailingRenewalsAreReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 3, daytonatest.WithFaults(daytonatest.Faults{
			Seed: 1, Rate5xx: 1, Routes: []string{daytonatest.RouteLastActivity},
		}))
		w.run(t, leaseMinutes*time.Minute)
		if w.recorder.atRisk != len(w.ids) {
			t.Fatalf("at-risk reports: %d, want %d (one per sandbox)", w.recorder.atRisk, len(w.ids))
		}
	})
}

// A sandbox deleted behind tether's back (two 404s) is not renewed again.
func TestGoneSandboxIsNotRenewed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 2)
		stop := start(w.renewer())
		time.Sleep(leaseMinutes * time.Minute)
		synctest.Wait()
		// Deleted by someone else; its intent stays observed.
		w.deleteElsewhere(t, w.ids[0])
		// Daytona answers the renewals of a deleted sandbox 201 for a day, so
		// only a census sees it gone: two in a row that read it 404 (a
		// census a lease, the first at most a lease after the delete).
		time.Sleep(3*leaseMinutes*time.Minute + time.Second)
		synctest.Wait()
		before := w.sim.CallsFor(w.ids[0])[daytonatest.RouteLastActivity]
		if before == 0 {
			t.Fatal("the sandbox was never renewed")
		}
		lists := w.sim.Calls()[daytonatest.RouteList]
		time.Sleep(5 * leaseMinutes * time.Minute)
		stop()
		if after := w.sim.CallsFor(w.ids[0])[daytonatest.RouteLastActivity]; after != before {
			t.Errorf("a gone sandbox was renewed %d more times", after-before)
		}
		// What finding it cost: one list a lease, and reads of the missing
		// sandbox only (the live one is listed, never read).
		if n := w.sim.Calls()[daytonatest.RouteList] - lists; n < 4 || n > 6 {
			t.Errorf("%d lists in 5 leases, want one a lease", n)
		}
		if n := w.sim.CallsFor(w.ids[1])[daytonatest.RouteGet]; n != 0 {
			t.Errorf("the listed live sandbox was read %d times", n)
		}
		if sb, _ := w.sim.Sandbox(w.ids[1]); sb.State != "started" {
			t.Errorf("the other sandbox: %s, want started", sb.State)
		}
	})
}

// A list that lags far behind the creates shows none of the renewed
// sandboxes: the census reads each, finds it alive, and the renewals go on.
func TestCensusThroughALaggingListKeepsRenewing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 3, daytonatest.WithListLag(24*time.Hour))
		w.run(t, 10*leaseMinutes*time.Minute)
		w.assertAlive(t)
		for _, id := range w.ids {
			if n := w.sim.CallsFor(id)[daytonatest.RouteGet]; n < 8 {
				t.Errorf("sandbox %s read %d times in 10 leases; the census should read each unlisted one once a lease", id, n)
			}
		}
	})
}

// A sandbox released between two journal scans is not renewed again: the
// renewal reads its intent right before the call. The journal is scanned
// once here (at the start), so no scan drops it.
func TestReleasedBetweenScansIsNotRenewed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 2)
		r := w.renewer()
		r.Scan = 100 * leaseMinutes * time.Minute
		stop := start(r)
		time.Sleep(leaseMinutes * time.Minute)
		synctest.Wait()
		w.journal.set("i0", intent.Released)
		before := w.sim.CallsFor(w.ids[0])[daytonatest.RouteLastActivity]
		other := w.sim.CallsFor(w.ids[1])[daytonatest.RouteLastActivity]
		if before == 0 {
			t.Fatal("the sandbox was never renewed before its release")
		}
		time.Sleep(3 * leaseMinutes * time.Minute)
		stop()
		if after := w.sim.CallsFor(w.ids[0])[daytonatest.RouteLastActivity]; after != before {
			t.Errorf("sandbox released between two scans renewed %d more times", after-before)
		}
		if after := w.sim.CallsFor(w.ids[1])[daytonatest.RouteLastActivity]; after < other+4 {
			t.Errorf("the other sandbox: %d renewals in 3 leases, want one a third of a lease", after-other)
		}
	})
}

// Spurious 404s on renewals (Daytona's access guard answers 404 for any
// error it meets; it answers a deleted sandbox's renewal 201) do not stop
// renewing a live sandbox: it lives on, renewed, and no timer fires.
func TestSpurious404sKeepRenewing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 1)
		stop := start(w.renewer())
		time.Sleep(leaseMinutes * time.Minute)
		synctest.Wait()
		w.sim.Inject(daytonatest.RouteLastActivity, 2, daytonatest.Scripted{Status: http.StatusNotFound})
		before := w.sim.CallsFor(w.ids[0])[daytonatest.RouteLastActivity]
		time.Sleep(5 * leaseMinutes * time.Minute)
		stop()
		synctest.Wait()
		// Two 404s in a row, then a renewal a third of a lease.
		if after := w.sim.CallsFor(w.ids[0])[daytonatest.RouteLastActivity]; after < before+2+12 {
			t.Errorf("%d renewal calls in 5 leases after two 404s: renewing stopped", after-before)
		}
		w.assertAlive(t)
	})
}

// A 429's Retry-After holds every renewal of its throttler, not only the
// refused one: no renewal arrives inside the window it announced, though
// other sandboxes fall due meanwhile. One call in flight at a time, so that
// none was already on its way when the 429 came; no census in the window.
func TestRetryAfterHoldsEveryRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const window = 30 * time.Second
		w := newWorld(t, 10, daytonatest.WithFaults(daytonatest.Faults{RetryAfter: window}))
		r := w.renewer()
		r.Concurrency = 1
		r.Census = 100 * leaseMinutes * time.Minute
		stop := start(r)
		time.Sleep(leaseMinutes * time.Minute)
		synctest.Wait()
		w.sim.Inject(daytonatest.RouteLastActivity, 1, daytonatest.Scripted{Status: http.StatusTooManyRequests})
		for w.sim.Throttle().Refused[daytonatest.ThrottlerAuthenticated] == 0 {
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
		}
		// Ten sandboxes renewed every 40 s or so: several fall due in the
		// window. None is renewed in it.
		before := w.sim.Calls()[daytonatest.RouteLastActivity]
		time.Sleep(window - time.Second)
		synctest.Wait()
		held := w.sim.Calls()[daytonatest.RouteLastActivity] - before
		time.Sleep(3 * leaseMinutes * time.Minute)
		stop()
		th := w.sim.Throttle()
		if th.Refused[daytonatest.ThrottlerAuthenticated] != 1 {
			t.Fatalf("refused: %v, want the one injected 429", th.Refused)
		}
		if in := th.InWindow[daytonatest.ThrottlerAuthenticated]; in != 0 {
			t.Errorf("%d renewals sent inside the window the 429 announced", in)
		}
		if held != 0 {
			t.Errorf("%d renewal calls inside the window", held)
		}
		w.assertAlive(t)
	})
}

// Renewals refused for longer than the lease (a 429 storm on the renewals'
// throttler): before the lease runs out the renewer lengthens each
// sandbox's auto-stop (the rescue), so Daytona stops none under the live
// runner; once renewals succeed again each gets its lease back (Restore).
func TestRescueOutlastsARenewalStorm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 3)
		var mu sync.Mutex
		restored := map[string]int{}
		r := w.renewer()
		r.Restore = func(in intent.Intent) { mu.Lock(); restored[in.ID]++; mu.Unlock() }
		stop := start(r)
		time.Sleep(leaseMinutes * time.Minute)
		w.sim.SetFaults(daytonatest.Faults{Rate429: 1, RetryAfter: 5 * time.Second, Routes: []string{daytonatest.RouteLastActivity}})
		time.Sleep(4 * leaseMinutes * time.Minute)
		synctest.Wait()
		w.assertAlive(t)
		for _, id := range w.ids {
			if sb, _ := w.sim.Sandbox(id); sb.AutoStopInterval != lease.DefaultRescue {
				t.Errorf("sandbox %s: auto-stop %d, want the rescue's %d", id, sb.AutoStopInterval, lease.DefaultRescue)
			}
		}
		w.sim.SetFaults(daytonatest.Faults{})
		time.Sleep(leaseMinutes * time.Minute)
		stop()
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(restored) != len(w.ids) {
			t.Errorf("restored %v, want each of the %d intents", restored, len(w.ids))
		}
	})
}

// The bound that remains: when the rescue is refused too (the storm is on
// every call of the throttler), Daytona stops the sandbox at its first
// check after the lease, but does not delete it: its auto-delete counts
// from the stop, and renewals that come back within another lease keep it.
func TestRescueRefusedStopsButKeeps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 1)
		stop := start(w.renewer())
		time.Sleep(leaseMinutes * time.Minute)
		w.sim.SetFaults(daytonatest.Faults{Rate429: 1, RetryAfter: 5 * time.Second, Routes: []string{daytonatest.RouteLastActivity, daytonatest.RouteAutoStop}})
		// Longer than the lease, shorter than two: past two, the stopped
		// sandbox's auto-delete (the lease, from its stop) fires.
		time.Sleep(3 * leaseMinutes * time.Minute / 2)
		w.sim.SetFaults(daytonatest.Faults{})
		time.Sleep(3 * leaseMinutes * time.Minute)
		stop()
		synctest.Wait()
		sb, _ := w.sim.Sandbox(w.ids[0])
		if sb.State != "stopped" || sb.DeleteRequested {
			t.Errorf("sandbox after the storm: %s (delete requested %v), want stopped by its lease and kept", sb.State, sb.DeleteRequested)
		}
		for _, e := range w.sim.TimerEvents() {
			if e.Kind != daytonatest.TimerAutoStop {
				t.Errorf("timer %s fired: the renewals did not keep the stopped sandbox", e.Kind)
			} else if late := e.At.Sub(e.LastActivity); late > leaseMinutes*time.Minute+10*time.Second {
				t.Errorf("stopped %s after its last renewal, beyond the lease and a check", late)
			}
		}
	})
}

// flaky404 answers every other read of one sandbox 404, as Daytona's access
// guard answers one it could not check for a database or cache hiccup
// (common/guards/resource-access.guard.ts:21-26); everything else is
// served by the simulator.
type flaky404 struct {
	inner handlerTransport
	id    string
	reads *atomic.Int64
}

func (t flaky404) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/sandbox/"+t.id) && t.reads.Add(1)%2 == 1 {
		rec := httptest.NewRecorder()
		rec.Header().Set("Content-Type", "application/json")
		rec.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(rec, `{"statusCode":404,"message":"Sandbox with ID or name %s not found","error":"Not Found"}`, t.id)
		return rec.Result(), nil
	}
	return t.inner.RoundTrip(req)
}

// One 404 is not "gone": a census that reads a sandbox 404, then alive,
// then 404 again (never twice in a row) keeps renewing it. The list lags,
// so every census reads it.
func TestCensusTakesOnlyTwo404sInARowForGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 2, daytonatest.WithListLag(24*time.Hour))
		reads := &atomic.Int64{}
		prov, err := daytona.New(daytona.Config{
			APIKey: daytonatest.DefaultKey, APIURL: "http://daytona.invalid/api",
			HTTPClient: &http.Client{Transport: flaky404{inner: handlerTransport{w.sim.Handler(), w.spent}, id: w.ids[0], reads: reads}},
			Logger:     slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		w.prov = prov
		w.run(t, 10*leaseMinutes*time.Minute)
		w.assertAlive(t)
		if n := reads.Load(); n < 6 {
			t.Fatalf("the flaky sandbox was read %d times in 10 leases; the test needs a census a lease", n)
		}
	})
}

// A sandbox deleted behind tether's back that stays `destroying` (a slow
// destroy) is gone for the census too: the list shows it, but not as one
// to renew, and renewals stop.
func TestDestroyingSandboxIsNotRenewed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 2, daytonatest.WithDestroyDelay(24*time.Hour))
		stop := start(w.renewer())
		time.Sleep(leaseMinutes * time.Minute)
		synctest.Wait()
		w.deleteElsewhere(t, w.ids[0])
		time.Sleep(2*leaseMinutes*time.Minute + time.Second)
		synctest.Wait()
		if sb, _ := w.sim.Sandbox(w.ids[0]); sb.State != "destroying" {
			t.Fatalf("the deleted sandbox is %s; the test needs it destroying", sb.State)
		}
		before := w.sim.CallsFor(w.ids[0])[daytonatest.RouteLastActivity]
		time.Sleep(5 * leaseMinutes * time.Minute)
		stop()
		if after := w.sim.CallsFor(w.ids[0])[daytonatest.RouteLastActivity]; after != before {
			t.Errorf("a destroying sandbox was renewed %d more times", after-before)
		}
		if sb, _ := w.sim.Sandbox(w.ids[1]); sb.State != "started" {
			t.Errorf("the other sandbox: %s, want started", sb.State)
		}
	})
}
