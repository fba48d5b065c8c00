package e2b_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
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

// benchLatency is the simulated API latency of every call.
const benchLatency = 50 * time.Millisecond

// BenchmarkDrain drains N live E2B sandboxes through tether's reaper, the
// real E2B provider (its own HTTP client, as tether builds it) and the real
// journal, against the simulated E2B API answering every call after 50 ms,
// at the reaper's default concurrency. Half of the sandboxes are observed
// and verified by the backstop's read (what tether run does on every
// observe); the other half are known only by tether's metadata (a create
// whose answer the runner never saw), found with GET /v2/sandboxes. It
// reports the drain against the ideal for that concurrency:
// calls x latency / min(concurrency, N).
//
//	go test -run '^$' -bench BenchmarkDrain -benchtime 3x ./provider/e2b/
//
// A restore in flight outlives E2B's kill of a paused sandbox
// (infra#3636), so the reaper reads each sandbox right before it kills it
// (the lookup by metadata is that read for the other half): a 204 to the
// kill of a sandbox read running is final, with no read to confirm it
// (E2B kills before it answers and deletes the snapshot with it:
// handlers/sandbox_kill.go:64-103). "paused" drains sandboxes that are
// paused: their kill is confirmed by one more read, once the restore
// window (here 1 s) has passed.
//
// The 429 case answers 5% of kills 429 with Retry-After: 1 and
// RateLimit-Remaining: 0, as the rate limiter does (middleware/ratelimit/
// ratelimit.go:126-149).
func BenchmarkDrain(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("N=%d,running", n), func(b *testing.B) {
			benchDrain(b, n, false, e2btest.Faults{Latency: benchLatency})
		})
	}
	for _, n := range []int{1, 1000} {
		b.Run(fmt.Sprintf("N=%d,paused", n), func(b *testing.B) {
			benchDrain(b, n, true, e2btest.Faults{Latency: benchLatency})
		})
	}
	b.Run("N=1000,running,429=5%,kill", func(b *testing.B) {
		benchDrain(b, 1000, false, e2btest.Faults{Seed: 1, Latency: benchLatency, Rate429: 0.05, RetryAfter: time.Second, Routes: []string{e2btest.RouteKill}})
	})
}

// benchRestoreWindow is the reaper's restore window in the paused case.
const benchRestoreWindow = time.Second

func benchDrain(b *testing.B, n int, paused bool, faults e2btest.Faults) {
	srv, p := testutil.E2B(b)
	// The planted sandboxes must not end by their own timeout mid-bench.
	srv.AddTeam(e2btest.DefaultTeam, e2btest.Limits{MaxLengthHours: 24, Concurrency: 2 * n})
	j, err := journal.Open(filepath.Join(b.TempDir(), "journal.db"), journal.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	r := &reaper.Reaper{Journal: j, Providers: provider.NewSet(p), Logger: slog.New(slog.DiscardHandler),
		AutoStopMinutes: 15, RestoreWindow: benchRestoreWindow}
	concurrency := min(reaper.DefaultConcurrency, n)

	var elapsed time.Duration
	var calls, reads, lists, kills, limited int
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		srv.SetFaults(e2btest.Faults{})
		intents := plantE2B(b, srv, j, r, p, n, paused)
		srv.SetFaults(faults)
		before := srv.Calls()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		b.StartTimer()

		rep := r.Drain(ctx, intents)

		b.StopTimer()
		cancel()
		if rep.Gone != n {
			b.Fatalf("drained %d of %d: %+v", rep.Gone, n, rep.Unresolved)
		}
		// Judged by the simulator's record: every planted sandbox killed
		// by a request, none left.
		if live := srv.Live(); live != 0 {
			b.Fatalf("%d sandboxes still live in the simulator", live)
		}
		for _, sb := range srv.Sandboxes() {
			if sb.State != e2btest.StateKilled || sb.KillReason != e2btest.KillRequest {
				b.Fatalf("sandbox %s: %s (%s)", sb.ID, sb.State, sb.KillReason)
			}
		}
		elapsed += rep.Elapsed
		after := srv.Calls()
		calls += sum(after) - sum(before)
		reads += after[e2btest.RouteGet] + after[e2btest.RouteList] - before[e2btest.RouteGet] - before[e2btest.RouteList]
		lists += after[e2btest.RouteList] - before[e2btest.RouteList]
		kills += after[e2btest.RouteKill] - before[e2btest.RouteKill]
		for _, in := range intents {
			if got, err := j.Get(in.ID); err == nil && got.Attempts > 0 {
				limited++
			}
		}
		b.StartTimer()
	}
	ideal := time.Duration(calls) * benchLatency / time.Duration(concurrency) / time.Duration(b.N)
	mean := elapsed / time.Duration(b.N)
	b.ReportMetric(float64(mean.Milliseconds()), "ms/drain")
	b.ReportMetric(float64(ideal.Milliseconds()), "ideal-ms")
	b.ReportMetric(float64(mean)/float64(ideal), "x-ideal")
	b.ReportMetric(float64(calls)/float64(n*b.N), "calls/sandbox")
	b.ReportMetric(float64(reads)/float64(n*b.N), "reads/sandbox")
	b.ReportMetric(float64(lists)/float64(n*b.N), "lists/sandbox")
	b.ReportMetric(float64(kills)/float64(n*b.N), "kills/sandbox")
	if faults.Rate429 > 0 {
		b.ReportMetric(float64(kills-n*b.N)/float64(b.N), "429d-kills/drain")
		b.ReportMetric(float64(limited)/float64(b.N), "intents-retried/drain")
		b.ReportMetric(float64(r.CurrentConcurrency()), "concurrency-at-end")
	}
}

func sum(m map[string]int) int {
	t := 0
	for _, v := range m {
		t += v
	}
	return t
}

// plantE2B declares n intents and puts their sandboxes in the simulator
// directly (running, or paused), carrying tether's metadata as a create
// through the provider would; every other one is observed (and verified
// by the backstop's read), the rest are found by metadata.
func plantE2B(b *testing.B, srv *e2btest.Server, j *journal.Journal, r *reaper.Reaper, p *e2b.Provider, n int, paused bool) []intent.Intent {
	account := p.Account()
	intents := make([]intent.Intent, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 64)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			in, _, err := j.Create(context.Background(), intent.Declaration{Labels: map[string]string{"bench": "drain"}, Provider: e2b.ProviderName, Account: account})
			if err != nil {
				errs <- err
				return
			}
			md := map[string]string{e2b.MetadataName: in.Name}
			for k, v := range in.Labels {
				md[k] = v
			}
			sb := srv.AddSandbox(e2btest.DefaultTeam, e2btest.SeedSandbox{Metadata: md, Timeout: time.Hour})
			if i%2 == 0 {
				if in, err = j.Observe(in.ID, sb.ID); err != nil {
					errs <- err
					return
				}
				// What tether run does on every observe: the backstop's
				// read, which also verifies the id.
				if err := r.Backstop(context.Background(), in); err != nil {
					errs <- err
					return
				}
			}
			if paused {
				if err := p.Stop(context.Background(), sb.ID); err != nil {
					errs <- err
					return
				}
			}
			intents[i] = in
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return intents
}
