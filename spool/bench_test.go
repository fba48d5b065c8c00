package spool

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
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
						if _, _, err := j.Create(b.Context(), NewIntent{Labels: map[string]string{"bench": "1"}}); err != nil {
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
