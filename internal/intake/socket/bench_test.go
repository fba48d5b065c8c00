package socket

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tether-run/tether/intentapi"
	"github.com/tether-run/tether/intentapi/client"

	"golang.org/x/sys/unix"

	"github.com/tether-run/tether/internal/intake"
	"github.com/tether-run/tether/journal"
)

// benchDir is where the benchmark puts its journal: the disk being
// measured. $TETHER_BENCH_DIR, default the temp directory.
func benchDir(b *testing.B) string {
	parent := os.Getenv("TETHER_BENCH_DIR")
	d, err := os.MkdirTemp(parent, "tbench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// measureFsync measures, once, the raw rate of one 4 KiB overwrite +
// fdatasync (what bbolt calls per sync) on dir's disk: the physical limit
// of a journal that syncs once per intent. The ratios are taken against it.
var fsyncOnce sync.Once
var fsyncPerSec, fsyncMs float64

func measureFsync(b *testing.B, dir string) {
	fsyncOnce.Do(func() {
		f := fsyncProbe(b, dir)
		defer f.Close()
		const n = 500
		start := time.Now()
		for i := 0; i < n; i++ {
			if err := fsyncPage(f, i); err != nil {
				b.Fatal(err)
			}
		}
		el := time.Since(start)
		fsyncPerSec = n / el.Seconds()
		fsyncMs = float64(el.Microseconds()) / 1000 / n
		fmt.Printf("raw fsync on %s: %.0f/s, %.3f ms each\n", dir, fsyncPerSec, fsyncMs)
	})
}

// fsyncProbe creates a 64-page file, written and synced once, so the probe
// measures overwrites: no block allocation or size change, the cheapest
// fsync the disk offers.
func fsyncProbe(b *testing.B, dir string) *os.File {
	f, err := os.Create(filepath.Join(dir, "fsync.probe"))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := f.Write(make([]byte, fsyncProbePages*4096)); err != nil {
		b.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	return f
}

const fsyncProbePages = 64

var fsyncPageBuf = make([]byte, 4096)

func fsyncPage(f *os.File, i int) error {
	if _, err := f.WriteAt(fsyncPageBuf, int64(i%fsyncProbePages)*4096); err != nil {
		return err
	}
	return unix.Fdatasync(int(f.Fd()))
}

// BenchmarkFsync is the raw rate alone: 4 KiB overwrite + fdatasync.
func BenchmarkFsync(b *testing.B) {
	f := fsyncProbe(b, benchDir(b))
	defer f.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := fsyncPage(f, i); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "fsync/s")
}

// BenchmarkIntentAck measures POST /v1/intents through the real socket
// into a real journal, at 1, 16 and 64 concurrent clients: throughput, ack
// latency p50/p99, and both against the raw fsync of the same disk
// (x-fsync: throughput over fsyncs/s; p99/fsync: p99 over one fsync).
func BenchmarkIntentAck(b *testing.B) {
	for _, cfg := range []struct{ clients, maxBatch int }{{1, 0}, {16, 0}, {64, 0}, {64, 1}} {
		clients := cfg.clients
		name := fmt.Sprintf("clients=%d", clients)
		if cfg.maxBatch == 1 {
			name += "/no-group-commit" // one commit per intent: the baseline group commit beats
		}
		b.Run(name, func(b *testing.B) {
			dir := benchDir(b)
			measureFsync(b, dir)
			j, err := journal.Open(filepath.Join(dir, "journal.db"), journal.Options{MaxBatch: cfg.maxBatch})
			if err != nil {
				b.Fatal(err)
			}
			defer j.Close()
			c, stop := serveBench(b, j)
			defer stop()
			// Warm the connections so dialing is not measured.
			var wg sync.WaitGroup
			for i := 0; i < clients; i++ {
				wg.Add(1)
				go func() { defer wg.Done(); c.Health(context.Background()) }()
			}
			wg.Wait()

			lat := make([][]time.Duration, clients)
			b.ResetTimer()
			for g := 0; g < clients; g++ {
				n := b.N / clients
				if g < b.N%clients {
					n++
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					lat[g] = make([]time.Duration, 0, n)
					for i := 0; i < n; i++ {
						t0 := time.Now()
						if _, err := c.CreateIntent(context.Background(), intentapi.CreateRequest{Labels: map[string]string{"bench": "1"}}); err != nil {
							b.Error(err)
							return
						}
						lat[g] = append(lat[g], time.Since(t0))
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			all := slices.Concat(lat...)
			slices.Sort(all)
			if len(all) == 0 {
				return
			}
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
			p50, p99 := ms(all[len(all)*50/100]), ms(all[len(all)*99/100])
			rate := float64(len(all)) / b.Elapsed().Seconds()
			b.ReportMetric(rate, "intents/s")
			st := j.Stats()
			b.ReportMetric(float64(st.Ops)/float64(max(st.Commits, 1)), "ops/commit")
			b.ReportMetric(float64(st.Busy.Microseconds())/1000/float64(max(st.Commits, 1)), "commit-ms")
			b.ReportMetric(p50, "p50-ms")
			b.ReportMetric(p99, "p99-ms")
			b.ReportMetric(rate/fsyncPerSec, "x-fsync")
			b.ReportMetric(p99/fsyncMs, "p99/fsync")
		})
	}
}

// serveBench serves the intent API over j and returns a client of it, and
// stop. The socket stays off the measured disk (which may be a FUSE mount,
// see testdata/slowfs): only the journal is measured.
func serveBench(b *testing.B, j *journal.Journal) (c *client.Client, stop func()) {
	b.Helper()
	s := &Server{Intake: &intake.Intake{Journal: j}}
	sockDir, err := os.MkdirTemp("", "tsock")
	if err != nil {
		b.Fatal(err)
	}
	sock := filepath.Join(sockDir, "t.sock")
	l, err := s.Listen(sock)
	if err != nil {
		os.RemoveAll(sockDir)
		b.Fatal(err)
	}
	go s.Serve(l)
	return client.New(sock), func() {
		s.Close()
		os.RemoveAll(sockDir)
	}
}
