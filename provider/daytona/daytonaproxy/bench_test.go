package daytonaproxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/intake"
	"github.com/tether-run/tether/internal/testutil"

	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider/daytona"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// Workload of BenchmarkProxyOverhead.
const (
	benchSequential = 300 // calls one after another
	benchWorkers    = 64  // concurrent callers
	benchPerWorker  = 20  // calls per concurrent caller
)

// BenchmarkProxyOverhead measures, in one run against one simulator (no
// simulated latency, answers at once), what the proxy adds to a call: the
// same creates and reads made directly and through the proxy, one at a
// time and from 64 concurrent callers. The journal goes to
// $TETHER_BENCH_DIR (default the temp directory). Its figures go to
// docs/benchmarks.md:
//
//	go test -run '^$' -bench BenchmarkProxyOverhead -benchtime 1x ./provider/daytona/daytonaproxy
func BenchmarkProxyOverhead(b *testing.B) {
	sim, _ := testutil.Daytona(b, daytonatest.WithCreateDelay(0), daytonatest.WithCreateWait(0),
		daytonatest.WithStopDelay(0), daytonatest.WithDestroyDelay(0))
	dir, err := os.MkdirTemp(os.Getenv("TETHER_BENCH_DIR"), "tpbench")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	j, err := journal.Open(filepath.Join(dir, "journal.db"), journal.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	p := &Proxy{Intake: &intake.Intake{Journal: j, Provider: "daytona", Accounts: map[string]string{"daytona": daytona.Fingerprint(sim.URL, daytonatest.DefaultKey)}}, Upstream: sim.URL, AutoStopMinutes: 15}
	l, err := p.Listen("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go p.Serve(l)
	defer p.Close()

	hc := &http.Client{Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}}
	call := func(method, url, body string) error {
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+daytonatest.DefaultKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("%s %s: %d", method, url, resp.StatusCode)
		}
		return err
	}
	// One sandbox to read, made directly.
	target, err := sim.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Name: "bench-target"})
	if err != nil {
		b.Fatal(err)
	}

	type result struct {
		p50, p99 time.Duration
		perSec   float64
	}
	var seq atomic.Int64
	measure := func(base, what string, workers, each int) result {
		var mu sync.Mutex
		var lat []time.Duration
		var wg sync.WaitGroup
		start := time.Now()
		for range workers {
			wg.Go(func() {
				mine := make([]time.Duration, 0, each)
				for range each {
					t0 := time.Now()
					var err error
					switch {
					case what == "create" && base == sim.URL:
						// Named, as the proxy names its creates, so the
						// simulator does the same work (its name check).
						err = call("POST", base+"/sandbox", fmt.Sprintf(`{"name":"direct-%d","labels":{"bench":"1"},"autoStopInterval":0}`, seq.Add(1)))
					case what == "create":
						err = call("POST", base+"/sandbox", `{"labels":{"bench":"1"},"autoStopInterval":0}`)
					default:
						err = call("GET", base+"/sandbox/"+target.ID, "")
					}
					if err != nil {
						b.Error(err)
						return
					}
					mine = append(mine, time.Since(t0))
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		slices.Sort(lat)
		if len(lat) == 0 {
			b.Fatal("no call succeeded")
		}
		return result{lat[len(lat)/2], lat[len(lat)*99/100], float64(len(lat)) / elapsed.Seconds()}
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d.Microseconds())/1000) }

	b.ResetTimer()
	for range b.N {
		var rows []string
		for _, what := range []string{"create", "get"} {
			for _, load := range []struct {
				name          string
				workers, each int
			}{{"sequential", 1, benchSequential}, {fmt.Sprintf("%d concurrent", benchWorkers), benchWorkers, benchPerWorker}} {
				d := measure(sim.URL, what, load.workers, load.each)
				x := measure(p.URL(l), what, load.workers, load.each)
				rows = append(rows, fmt.Sprintf("| %s | %s | %s / %s | %s / %s | %s / %s | %.0f / %.0f |",
					what, load.name, ms(d.p50), ms(x.p50), ms(d.p99), ms(x.p99),
					ms(x.p50-d.p50), ms(x.p99-d.p99), d.perSec, x.perSec))
				key := what + "-" + strings.ReplaceAll(load.name, " ", "-")
				b.ReportMetric(float64((x.p50-d.p50).Microseconds())/1000, key+"-p50-added-ms")
				b.ReportMetric(x.perSec, key+"-proxy-calls/s")
			}
		}
		// One journal write alone, one after another: what a create's
		// intent costs before anything is forwarded.
		var jl []time.Duration
		for range benchSequential {
			t0 := time.Now()
			if _, _, err := j.Create(context.Background(), intent.Declaration{Provider: "daytona"}); err != nil {
				b.Fatal(err)
			}
			jl = append(jl, time.Since(t0))
		}
		slices.Sort(jl)
		rows = append(rows, fmt.Sprintf("| journal create alone | sequential | %s | %s | | |", ms(jl[len(jl)/2]), ms(jl[len(jl)*99/100])))
		b.Logf("\n| call | load | p50 ms direct / proxy | p99 ms direct / proxy | added ms p50 / p99 | calls/s direct / proxy |\n| --- | --- | --- | --- | --- | --- |\n%s\njournal commits: %+v", strings.Join(rows, "\n"), j.Stats())
	}
}
