package journal

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	bolt "go.etcd.io/bbolt"
)

// BenchmarkJournalCreate is Create alone (no HTTP) at 1, 16 and 64
// concurrent callers, on the disk under $TETHER_BENCH_DIR.
func BenchmarkJournalCreate(b *testing.B) {
	for _, callers := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			dir, err := os.MkdirTemp(os.Getenv("TETHER_BENCH_DIR"), "tjbench")
			if err != nil {
				b.Fatal(err)
			}
			defer os.RemoveAll(dir)
			j, err := Open(filepath.Join(dir, "journal.db"), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer j.Close()
			b.ResetTimer()
			var wg sync.WaitGroup
			for g := 0; g < callers; g++ {
				n := b.N / callers
				if g < b.N%callers {
					n++
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < n; i++ {
						if _, _, err := j.Create(b.Context(), intent.Declaration{Labels: map[string]string{"bench": "1"}}); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "intents/s")
		})
	}
}

// BenchmarkPruneNothingDue is a prune pass beside 100,000 intents that
// ended within the retention: what every Open with a Retention starts,
// and every later pass, pays when nothing is due.
func BenchmarkPruneNothingDue(b *testing.B) {
	j, err := Open(filepath.Join(b.TempDir(), "journal.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	const n, perTx = 100_000, 5_000
	now := time.Now().UTC()
	for i := 0; i < n; i += perTx {
		if _, err := j.Apply(b.Context(), &Change{run: func(tx *bolt.Tx) error {
			for range perTx {
				id := newID()
				in := intent.Plan(j.Owner(), intent.Declaration{ID: id, Labels: map[string]string{"n": fmt.Sprint(i)}}, now)
				in.State, in.Outcome = intent.Released, intent.OutcomeDeleted
				if err := store(tx, in); err != nil {
					return err
				}
			}
			return nil
		}}); err != nil {
			b.Fatal(err)
		}
	}
	cutoff := now.Add(-time.Hour)
	b.ResetTimer()
	for b.Loop() {
		if got, err := j.Prune(b.Context(), cutoff, 0); got != 0 || err != nil {
			b.Fatalf("pruned %d, %v", got, err)
		}
	}
}
