package reaper_test

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
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// benchLatency is the simulated API latency of every call.
const benchLatency = 50 * time.Millisecond

// BenchmarkDrain drains N live sandboxes (half observed and verified by the
// backstop's read, as tether run does on every observe; half known only by
// name) through the real Daytona provider and the real journal, against
// the simulator answering every call after 50 ms, at the default
// concurrency. It reports the drain time against the ideal for that
// concurrency: calls x latency / min(concurrency, N).
//
//	go test -run '^$' -bench BenchmarkDrain -benchtime 3x ./internal/reaper/
//
// The simulator destroys a sandbox 5 ms after its delete; the reaper's
// first confirmation read waits 10 ms (ConfirmDelay, whose default of 1 s
// is about what the real server takes).
//
// The 429 cases answer 5% of calls 429, asking to retry after 1 s, as the
// real server does: Retry-After-<throttler> (sandbox-lifecycle for a delete,
// authenticated for a read). "lifecycle" limits them to deletes; "all" hits
// every call. in-window is the requests sent while a throttle window a 429
// announced for the organization was still open (the simulator counts them).
func BenchmarkDrain(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) { benchDrain(b, n, daytonatest.Faults{Latency: benchLatency}) })
	}
	b.Run("N=1000,429=5%,lifecycle", func(b *testing.B) {
		benchDrain(b, 1000, daytonatest.Faults{Seed: 1, Latency: benchLatency, Rate429: 0.05, RetryAfter: time.Second, Routes: []string{daytonatest.RouteDelete}})
	})
	b.Run("N=1000,429=5%,all", func(b *testing.B) {
		benchDrain(b, 1000, daytonatest.Faults{Seed: 1, Latency: benchLatency, Rate429: 0.05, RetryAfter: time.Second})
	})
}

func benchDrain(b *testing.B, n int, faults daytonatest.Faults) {
	srv, prov := testutil.Daytona(b)
	j, err := journal.Open(filepath.Join(b.TempDir(), "journal.db"), journal.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	r := &reaper.Reaper{Journal: j, Providers: provider.NewSet(prov), Logger: slog.New(slog.DiscardHandler),
		AutoStopMinutes: 15, ConfirmDelay: 10 * time.Millisecond}
	concurrency := min(reaper.DefaultConcurrency, n)

	var elapsed time.Duration
	var calls, reads, deletes, limited, inWindow, refused int
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		srv.SetFaults(daytonatest.Faults{})
		intents := plant(b, srv, j, r, prov.Account(), n)
		srv.SetFaults(faults)
		before, tb := srv.Calls(), srv.Throttle()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		b.StartTimer()

		rep := r.Drain(ctx, intents)

		b.StopTimer()
		cancel()
		if rep.Gone != n {
			b.Fatalf("drained %d of %d: %+v", rep.Gone, n, rep.Unresolved)
		}
		elapsed += rep.Elapsed
		after, ta := srv.Calls(), srv.Throttle()
		calls += sum(after) - sum(before)
		reads += after[daytonatest.RouteGet] + after[daytonatest.RouteList] - before[daytonatest.RouteGet] - before[daytonatest.RouteList]
		deletes += after[daytonatest.RouteDelete] - before[daytonatest.RouteDelete]
		inWindow += sum(ta.InWindow) - sum(tb.InWindow)
		refused += sum(ta.Refused) - sum(tb.Refused)
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
	b.ReportMetric(float64(deletes)/float64(n*b.N), "deletes/sandbox")
	if faults.Rate429 > 0 {
		b.ReportMetric(float64(limited)/float64(b.N), "intents-429d/drain")
		b.ReportMetric(float64(refused)/float64(b.N), "429s/drain")
		b.ReportMetric(float64(inWindow)/float64(b.N), "in-window/drain")
		b.ReportMetric(float64(r.CurrentConcurrency()), "concurrency-at-end")
	}
}

// plant declares n intents and puts their sandboxes in the simulator
// directly; every other one is observed (and verified by the backstop's
// read), the rest are found by name.
func plant(b *testing.B, srv *daytonatest.Server, j *journal.Journal, r *reaper.Reaper, account string, n int) []intent.Intent {
	intents := make([]intent.Intent, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 64)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			in, _, err := j.Create(context.Background(), intent.Declaration{Labels: map[string]string{"bench": "drain"}, Provider: "daytona", Account: account})
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
				// What tether run does on every observe: the backstop's
				// read, which also verifies the id.
				if err := r.Backstop(context.Background(), in); err != nil {
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
