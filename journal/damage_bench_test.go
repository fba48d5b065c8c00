package journal

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/journal/boltcheck"
	bolt "go.etcd.io/bbolt"
)

// BenchmarkOpenCheck is what the page check adds to every start: the check
// alone, and Open as a whole (check, bbolt's open with its own page walk,
// the marker's stat), on journals of 1,000 and 10,000 live intents, on the
// disk under $TETHER_BENCH_DIR (page cache warm, as on a restart).
func BenchmarkOpenCheck(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		dir, err := os.MkdirTemp(os.Getenv("TETHER_BENCH_DIR"), "tjcheck")
		if err != nil {
			b.Fatal(err)
		}
		defer os.RemoveAll(dir)
		path := filepath.Join(dir, "journal.db")
		j, err := Open(path, Options{})
		if err != nil {
			b.Fatal(err)
		}
		var wg sync.WaitGroup
		for g := range 128 {
			wg.Go(func() {
				for i := g; i < n; i += 128 {
					if _, _, err := j.Create(b.Context(), intent.Declaration{Labels: map[string]string{"run": fmt.Sprint(i), "team": "bench"}}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		j.Close()
		fi, _ := os.Stat(path)
		b.Run(fmt.Sprintf("intents=%d/check", n), func(b *testing.B) {
			b.ReportMetric(float64(fi.Size()), "file-bytes")
			for b.Loop() {
				f, err := os.Open(path)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := boltcheck.CheckMapped(f, fi.Size()); err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
		})
		b.Run(fmt.Sprintf("intents=%d/open", n), func(b *testing.B) {
			for b.Loop() {
				j, err := Open(path, Options{})
				if err != nil {
					b.Fatal(err)
				}
				j.Close()
			}
		})
		b.Run(fmt.Sprintf("intents=%d/bbolt-open-alone", n), func(b *testing.B) {
			for b.Loop() {
				db, err := bolt.Open(path, 0o600, &bolt.Options{NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
				if err != nil {
					b.Fatal(err)
				}
				db.Close()
			}
		})
	}
}
