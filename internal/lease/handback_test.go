package lease_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/lease"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/daytona"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// handBackReaper is the reaper as the sidecar hands it to the policy.
type handBackReaper struct{ *reaper.Reaper }

func (r handBackReaper) ApplyLease(context.Context, intent.Intent) error { return nil }
func (r handBackReaper) Backstop(context.Context, intent.Intent) error   { return nil }
func (r handBackReaper) EndLease(ctx context.Context, in intent.Intent, autoStop int) error {
	err := r.Reaper.EndLease(ctx, in, autoStop)
	if errors.Is(err, reaper.ErrForeign) || errors.Is(err, provider.ErrNotFound) {
		return fmt.Errorf("%w: %w", lease.ErrNotOurs, err)
	}
	return err
}

// keptWorld is a real journal with n intents released as kept under a
// lease, each with its sandbox in the simulator as lease mode left it
// (auto-stop and auto-delete of the lease), and the real reaper over the
// Daytona provider over the simulator, served in memory.
type keptWorld struct {
	sim     *daytonatest.Server
	j       *journal.Journal
	r       *reaper.Reaper
	intents []intent.Intent
}

func newKeptWorld(t *testing.T, n int, opts ...daytonatest.Option) *keptWorld {
	t.Helper()
	sim := daytonatest.NewUnstartedServer(append([]daytonatest.Option{daytonatest.WithMinute(time.Minute)}, opts...)...)
	t.Cleanup(sim.Close)
	prov, err := daytona.New(daytona.Config{
		APIKey: daytonatest.DefaultKey, APIURL: "http://daytona.invalid/api",
		HTTPClient: &http.Client{Transport: handlerTransport{h: sim.Handler()}},
		Logger:     slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	j, err := journal.Open(filepath.Join(t.TempDir(), "journal.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	w := &keptWorld{sim: sim, j: j, r: &reaper.Reaper{Journal: j, Providers: provider.NewSet(prov), Logger: slog.New(slog.DiscardHandler)}}
	stop := leaseMinutes
	for range n {
		in, _, err := j.Create(context.Background(), intent.Declaration{Provider: daytona.ProviderName, Account: prov.Account(), Lease: leaseMinutes})
		if err != nil {
			t.Fatal(err)
		}
		sb, err := sim.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Name: in.Name, Labels: in.Labels, AutoStopInterval: &stop, AutoDeleteInterval: &stop})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := j.Observe(in.ID, sb.ID); err != nil {
			t.Fatal(err)
		}
		if in, err = j.Release(in.ID, intent.OutcomeKept); err != nil {
			t.Fatal(err)
		}
		w.intents = append(w.intents, in)
	}
	return w
}

func (w *keptWorld) policy() *lease.Policy {
	return &lease.Policy{Reaper: handBackReaper{w.r}, Journal: w.j, AutoStop: 15, Logger: slog.New(slog.DiscardHandler)}
}

// assertHandedBack: the simulator shows the sandbox handed back (auto-stop
// 15, auto-delete never, the keep label), alive, and the journal says done.
func (w *keptWorld) assertHandedBack(t *testing.T, in intent.Intent) {
	t.Helper()
	sb, _ := w.sim.Sandbox(in.SandboxID)
	if sb.State != "started" || sb.AutoStopInterval != 15 || sb.AutoDeleteInterval != -1 || !provider.KeepValue(sb.Labels[provider.LabelKeep]) {
		t.Errorf("sandbox %s: %s, auto-stop %d, auto-delete %d, labels %v; want started, 15, -1, %s=true",
			sb.ID, sb.State, sb.AutoStopInterval, sb.AutoDeleteInterval, sb.Labels, provider.LabelKeep)
	}
	if got, _ := w.j.Get(in.ID); !got.HandedBack {
		t.Errorf("intent %s: hand-back not journaled", in.ID)
	}
}

// A hand-back refused by 429s for 40 s (a 30 s bound once gave up after
// 35 s, and Daytona deleted the sandbox a lease later) is tried until
// Daytona confirms it: the sandbox is handed back within its lease and
// outlives it.
func TestHandBackOutlastsA429Storm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const storm = 40 * time.Second
		w := newKeptWorld(t, 1, daytonatest.WithFaults(daytonatest.Faults{
			Rate429: 1, RetryAfter: 5 * time.Second, Routes: []string{daytonatest.RouteAutoStop},
		}))
		p := w.policy()
		p.Kept(w.intents[0])
		time.Sleep(storm)
		if n := w.sim.Throttle().Refused[daytonatest.ThrottlerAuthenticated]; n < 5 {
			t.Fatalf("%d setters refused in the storm: it did not bite", n)
		}
		if got, _ := w.j.Get(w.intents[0].ID); got.HandedBack {
			t.Fatal("handed back during the storm")
		}
		w.sim.SetFaults(daytonatest.Faults{})
		time.Sleep(leaseMinutes*time.Minute - storm)
		w.assertHandedBack(t, w.intents[0])
		time.Sleep(5 * leaseMinutes * time.Minute) // well past the lease it had
		w.assertHandedBack(t, w.intents[0])
		p.Close()
	})
}

// A hand-back cut short (the drain's deadline, tether stopped) stays
// pending in the journal; the next run's Resume finishes it, and leaves
// alone what is done.
func TestHandBackResumesAfterARestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newKeptWorld(t, 2)
		w.sim.SetFaults(daytonatest.Faults{Rate5xx: 1, Routes: []string{daytonatest.RouteAutoStop}})
		first := w.policy()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		<-first.EndKept(ctx) // the drain: its deadline passes
		cancel()
		first.Close() // tether exits
		for _, in := range w.intents {
			if got, _ := w.j.Get(in.ID); !got.HandBackPending() {
				t.Fatalf("intent %s: not pending after a drain that could not hand it back", in.ID)
			}
		}
		if _, err := w.j.MarkHandedBack(w.intents[1].ID); err != nil { // done, say, by hand
			t.Fatal(err)
		}
		w.sim.SetFaults(daytonatest.Faults{})
		setters := w.sim.CallsFor(w.intents[1].SandboxID)[daytonatest.RouteAutoStop]

		second := w.policy() // the next run
		second.Resume()
		time.Sleep(time.Minute)
		w.assertHandedBack(t, w.intents[0])
		if n := w.sim.CallsFor(w.intents[1].SandboxID)[daytonatest.RouteAutoStop]; n != setters {
			t.Errorf("a sandbox handed back already was set again (%d calls)", n-setters)
		}
		second.Close()
	})
}
