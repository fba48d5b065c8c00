package lease_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/lease"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// TestBenchLease is a benchmark, not a test: it measures lease mode at the
// real server's pace on synctest's fake clock (synctest needs a
// *testing.T, hence a Test, skipped unless asked for):
//
//	TETHER_BENCH_LEASE=1 go test -run BenchLease -v ./internal/lease
//
// with 200 sandboxes (TETHER_BENCH_LEASE_N sets another number).
// It reports the renewal calls per sandbox per hour at the default lease,
// and, after a total loss (tether and runner gone at one instant), the
// time until each sandbox stops (its compute ends; lease mode deletes it
// within another lease), against a fixed 15-minute auto-stop whose runner was busy up to
// the loss; the ratio of the running time after the loss is the ratio of
// credit-minutes burned.
func TestBenchLease(t *testing.T) {
	if os.Getenv("TETHER_BENCH_LEASE") != "1" {
		t.Skip("a benchmark: TETHER_BENCH_LEASE=1 go test -run BenchLease -v ./internal/lease")
	}
	n := 200
	if v, err := strconv.Atoi(os.Getenv("TETHER_BENCH_LEASE_N")); err == nil && v > 0 {
		n = v
	}
	measure := func(t *testing.T, autoStop int, r *lease.Renewer, w *world) (perHour float64, after []time.Duration) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- r.Run(ctx) }()
		time.Sleep(time.Hour + 17*time.Second) // the loss falls anywhere in a renewal cycle
		cancel()
		<-done
		synctest.Wait()
		lost := time.Now()
		perHour = float64(w.sim.Calls()[daytonatest.RouteLastActivity]) / float64(n) / lost.Sub(start).Hours()
		time.Sleep(time.Duration(autoStop)*time.Minute + 5*time.Minute)
		for _, e := range w.sim.TimerEvents() {
			if e.Kind == daytonatest.TimerAutoStop {
				after = append(after, e.At.Sub(lost))
			}
		}
		if len(after) != n {
			t.Fatalf("%d of %d sandboxes stopped", len(after), n)
		}
		slices.Sort(after)
		return perHour, after
	}
	report := func(t *testing.T, what string, perHour float64, after []time.Duration) time.Duration {
		var sum time.Duration
		for _, d := range after {
			sum += d
		}
		mean := sum / time.Duration(len(after))
		t.Logf("%s: %.1f last-activity calls per sandbox per hour; after the loss, each sandbox stops in: min %s, mean %s, max %s",
			what, perHour, after[0].Round(time.Second), mean.Round(time.Second), after[len(after)-1].Round(time.Second))
		return mean
	}

	var leaseMean, fixedMean time.Duration
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, n) // auto-stop 2, auto-delete 2: lease mode's settings
		r := &lease.Renewer{Journal: w.journal, Provider: w.prov, Lease: leaseMinutes * time.Minute, Logger: slog.New(slog.DiscardHandler)}
		perHour, after := measure(t, leaseMinutes, r, w)
		leaseMean = report(t, "lease mode, --lease 2 (renewed every 40 s, jittered 20%)", perHour, after)
	})
	synctest.Test(t, func(t *testing.T) {
		// The baseline: a fixed 15-minute auto-stop (with an auto-delete,
		// so that it is deleted at all) on sandboxes whose runner used them through
		// Daytona's proxy every 5 s (the server's throttle) up to the loss.
		w := newWorldStop(t, n, 15)
		r := &lease.Renewer{Journal: w.journal, Provider: w.prov, Lease: 15 * time.Minute, Period: 5 * time.Second, Jitter: -1, Logger: slog.New(slog.DiscardHandler)}
		perHour, after := measure(t, 15, r, w)
		fixedMean = report(t, "fixed 15-minute auto-stop, runner busy until the loss", perHour, after)
	})
	t.Logf("credit-minutes burned after a total loss, fixed 15 min / lease 2: %.1fx (means)", float64(fixedMean)/float64(leaseMean))
}

// BenchmarkScanJournal is the renewer's scan of a journal of 10,000 live
// intents (Journal.Live), which it makes every 5 s at most.
//
//	go test -run '^$' -bench ScanJournal -benchtime 20x ./internal/lease
func BenchmarkScanJournal(b *testing.B) {
	j, err := journal.Open(filepath.Join(b.TempDir(), "journal.db"), journal.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	for i := 0; i < 10_000; i++ { // the last of each 500 is waited for
		c, err := j.PrepareCreate(intent.Declaration{Labels: map[string]string{"run": "bench"}})
		if err != nil {
			b.Fatal(err)
		}
		if err := j.Submit(c); err != nil {
			b.Fatal(err)
		}
		if i%500 == 499 {
			if _, err := c.Wait(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ResetTimer()
	for b.Loop() {
		live, err := j.Live()
		if err != nil || len(live) != 10_000 {
			b.Fatalf("%d live, %v", len(live), err)
		}
	}
}
