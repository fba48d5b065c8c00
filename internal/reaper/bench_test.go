package reaper_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/provider/daytona"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
	"github.com/tether-run/tether/spool"
)

// benchLatency is the simulated API latency of every call.
const benchLatency = 50 * time.Millisecond

// BenchmarkDrain drains N live sandboxes (half observed, half known only by
// name) through the real Daytona provider and the real journal, against the
// simulator answering every call after 50 ms, at the default concurrency.
// It reports the drain time against the ideal for that concurrency:
// calls x latency / min(concurrency, N).
//
//	go test -run '^$' -bench BenchmarkDrain -benchtime 3x ./internal/reaper/
//
// The last case adds 429s to 5% of calls, each asking to retry after 1 s,
// which the reaper honours: the ideal is then no longer reachable, and the
// figure to watch is the drain time against the 8 s target.
func BenchmarkDrain(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) { benchDrain(b, n, daytonatest.Faults{Latency: benchLatency}) })
	}
	b.Run("N=1000,429=5%", func(b *testing.B) {
		benchDrain(b, 1000, daytonatest.Faults{Seed: 1, Latency: benchLatency, Rate429: 0.05, RetryAfter: time.Second})
	})
}

func benchDrain(b *testing.B, n int, faults daytonatest.Faults) {
	srv := daytonatest.NewServer()
	defer srv.Close()
	prov, err := daytona.New(daytona.Config{APIKey: daytonatest.DefaultKey, APIURL: srv.URL, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	j, err := spool.Open(filepath.Join(b.TempDir(), "journal.db"), spool.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	r := &reaper.Reaper{Journal: j, Provider: prov, Logger: slog.New(slog.DiscardHandler)}
	concurrency := min(reaper.DefaultConcurrency, n)

	var elapsed time.Duration
	var calls, limited int
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		srv.SetFaults(daytonatest.Faults{})
		intents := plant(b, srv, j, prov.Account(), n)
		srv.SetFaults(faults)
		before := sum(srv.Calls())
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		b.StartTimer()

		rep := r.Drain(ctx, intents)

		b.StopTimer()
		cancel()
		if rep.Gone != n {
			b.Fatalf("drained %d of %d: %+v", rep.Gone, n, rep.Unresolved)
		}
		elapsed += rep.Elapsed
		calls += sum(srv.Calls()) - before
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
	if faults.Rate429 > 0 {
		b.ReportMetric(float64(limited)/float64(b.N), "intents-429d/drain")
	}
}

// plant declares n intents and puts their sandboxes in the simulator
// directly (no API calls, so the setup is quick); every other one is
// observed, the rest are found by name.
func plant(b *testing.B, srv *daytonatest.Server, j *spool.Journal, account string, n int) []spool.Intent {
	intents := make([]spool.Intent, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 64)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			in, _, err := j.Create(context.Background(), spool.NewIntent{Labels: map[string]string{"bench": "drain"}, Provider: "daytona", Account: account})
			if err != nil {
				errs <- err
				return
			}
			sb, err := srv.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Name: in.Name, Labels: in.Labels})
			if err != nil {
				errs <- err
				return
			}
			if i%2 == 0 {
				if in, err = j.Observe(in.ID, sb.ID); err != nil {
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
