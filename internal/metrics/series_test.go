package metrics_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/metrics"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider/daytona"
	"github.com/tether-run/tether/provider/e2b"
)

// documented reads docs/operations.md's table of metrics: name → type and
// label names.
func documented(t *testing.T) map[string]struct {
	typ    string
	labels []string
} {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `(tether_[a-z_]+)(?:\\{([a-z_,]+)\\})?` \\| ([a-z]+) \\|")
	out := map[string]struct {
		typ    string
		labels []string
	}{}
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		var labels []string
		if m[2] != "" {
			labels = strings.Split(m[2], ",")
		}
		slices.Sort(labels)
		out[m[1]] = struct {
			typ    string
			labels []string
		}{m[3], labels}
	}
	if len(out) < 10 {
		t.Fatalf("found %d metrics in docs/operations.md's table: has its format changed?", len(out))
	}
	return out
}

// TestEveryDocumentedSeriesFromTheFirstScrape: the first scrape of a fresh
// endpoint, before anything happened, has every series docs/operations.md
// lists, with its type and label names, and a value; every label set that
// can be known in advance is there at 0; and no tether series is
// undocumented.
func TestEveryDocumentedSeriesFromTheFirstScrape(t *testing.T) {
	j, err := journal.Open(filepath.Join(t.TempDir(), "journal.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	// As tether run has it: every provider it knows named, those it has
	// credentials for wrapped before the first scrape.
	m := metrics.New(j, "1.2.3", "daytona", "e2b", "docker")
	day, err := daytona.New(daytona.Config{APIKey: "k", APIURL: "http://127.0.0.1:1/api"})
	if err != nil {
		t.Fatal(err)
	}
	e2bp, err := e2b.New(e2b.Config{APIKey: "k", APIURL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	m.Provider(day)
	m.Provider(e2bp)
	fams := scrape(t, m.Handler())
	types := map[dto.MetricType]string{dto.MetricType_COUNTER: "counter", dto.MetricType_GAUGE: "gauge", dto.MetricType_HISTOGRAM: "histogram"}
	doc := documented(t)
	for name, want := range doc {
		f, ok := fams[name]
		if !ok {
			t.Errorf("%s: documented, not in the first scrape", name)
			continue
		}
		if got := types[f.GetType()]; got != want.typ {
			t.Errorf("%s: type %s, documented %s", name, got, want.typ)
		}
		if len(f.GetMetric()) == 0 {
			t.Errorf("%s: no series", name)
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, lp.GetName())
			}
			slices.Sort(labels)
			if !slices.Equal(labels, want.labels) {
				t.Errorf("%s: labels %v, documented %v", name, labels, want.labels)
				break
			}
		}
	}
	for name := range fams {
		if _, ok := doc[name]; strings.HasPrefix(name, "tether_") && !ok {
			t.Errorf("%s: scraped, not documented in docs/operations.md", name)
		}
	}
	ops := len(metrics.Ops(day)) + len(metrics.Ops(e2bp))
	np := 3
	for _, c := range []struct {
		name string
		want int
	}{
		{"tether_provider_calls_total", ops * len(metrics.Outcomes)},
		{"tether_provider_call_duration_seconds", ops},
		{"tether_rate_limit_waits_total", np},
		{"tether_rate_limit_wait_seconds_total", np},
		{"tether_unresolved_intents", np},
		{"tether_leased_sandboxes", np},
		{"tether_lease_at_risk_total", np},
		{"tether_intents", np * len(metrics.States)},
		{"tether_intents_declared_total", len(metrics.Intakes)},
		{"tether_drain_intents_total", np * len(metrics.DrainStates)},
	} {
		if got := len(fams[c.name].GetMetric()); got != c.want {
			t.Errorf("%s: %d series at start, want %d", c.name, got, c.want)
		}
	}
	if got := sum(fams, "tether_build_info", "version", "1.2.3", "goversion", runtime.Version()); got != 1 {
		t.Errorf("tether_build_info = %v", got)
	}
	if _, ok := fams["go_goroutines"]; !ok {
		t.Error("no Go runtime series (go_*)")
	}
	if _, ok := fams["process_resident_memory_bytes"]; !ok {
		t.Error("no process series (process_*)")
	}
}

// TestScrapeFollowsTheJournal: the intents by state a scrape shows follow
// creates, observes, releases and the intakes' declarations.
func TestScrapeFollowsTheJournal(t *testing.T) {
	j, err := journal.Open(filepath.Join(t.TempDir(), "journal.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	m := metrics.New(j, "test", "daytona", "e2b")
	var ids []string
	for range 5 {
		in, _, err := j.Create(t.Context(), intent.Declaration{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, in.ID)
		m.Declared("socket")
	}
	m.Declared("proxy")
	if _, err := j.Observe(ids[0], "sb-0"); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Release(ids[1], intent.OutcomeDeleted); err != nil {
		t.Fatal(err)
	}
	fams := scrape(t, m.Handler())
	for _, c := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"state", "pending"}, 3}, {[]string{"state", "observed"}, 1}, {[]string{"state", "released"}, 1}, {[]string{"state", "gone"}, 0},
	} {
		if got := sum(fams, "tether_intents", c.labels...); got != c.want {
			t.Errorf("tether_intents%v = %v, want %v", c.labels, got, c.want)
		}
	}
	if got := sum(fams, "tether_intents_declared_total", "intake", "socket"); got != 5 {
		t.Errorf("declared through the socket: %v", got)
	}
	if got := sum(fams, "tether_intents_declared_total", "intake", "proxy"); got != 1 {
		t.Errorf("declared through the proxy: %v", got)
	}
}

// blockingJournal holds a scrape inside Counts until release closes.
type blockingJournal struct {
	reads   atomic.Int64
	inside  chan struct{}
	release chan struct{}
}

func (b *blockingJournal) CountsByProvider() (map[string]map[intent.State]int, error) {
	b.reads.Add(1)
	b.inside <- struct{}{}
	<-b.release
	return nil, nil
}
func (b *blockingJournal) Size() (int64, error) { return 0, nil }

// TestScrapesAreLimited: while one scrape is being written, DefaultMaxScrapes
// are served at once, sharing it (the journal is read once for all of
// them); the others wait DefaultScrapeWait and are answered 503 with
// Retry-After; afterwards scrapes are served again.
func TestScrapesAreLimited(t *testing.T) {
	b := &blockingJournal{inside: make(chan struct{}, 64), release: make(chan struct{})}
	h := metrics.New(b, "test").Handler()
	const extra = 3
	type answer struct {
		code       int
		retryAfter string
	}
	answers := make(chan answer, metrics.DefaultMaxScrapes+extra)
	start := time.Now()
	for range metrics.DefaultMaxScrapes + extra {
		go func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			answers <- answer{rec.Code, rec.Header().Get("Retry-After")}
		}()
	}
	select {
	case <-b.inside:
	case <-time.After(testutil.WaitBound):
		t.Fatal("no scrape started")
	}
	// Nothing finishes while the journal read is held: exactly the scrapes
	// past the limit are refused.
	for range extra {
		select {
		case a := <-answers:
			if a.code != http.StatusServiceUnavailable || a.retryAfter == "" {
				t.Fatalf("a scrape past the limit: %d, Retry-After %q; want 503 with Retry-After", a.code, a.retryAfter)
			}
		case <-time.After(testutil.WaitBound):
			t.Fatal("the scrapes past the limit were never refused")
		}
	}
	if waited := time.Since(start); waited < metrics.DefaultScrapeWait {
		t.Errorf("refused after %s, before the %s wait", waited, metrics.DefaultScrapeWait)
	}
	close(b.release)
	for range metrics.DefaultMaxScrapes {
		if a := <-answers; a.code != http.StatusOK {
			t.Errorf("a scrape within the limit: %d", a.code)
		}
	}
	if n := b.reads.Load(); n != 1 {
		t.Errorf("the journal was read %d times for scrapes written together, want 1", n)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusOK || b.reads.Load() != 2 {
		t.Fatalf("a scrape afterwards: %d, journal reads %d", rec.Code, b.reads.Load())
	}
}

// countingJournal counts the scrapes that read it.
type countingJournal struct{ reads atomic.Int64 }

func (c *countingJournal) CountsByProvider() (map[string]map[intent.State]int, error) {
	c.reads.Add(1)
	return nil, nil
}
func (c *countingJournal) Size() (int64, error) { return 0, nil }

// TestEndpointHoldsBoundedConnections: with DefaultMaxConns connections
// open and silent, a scrape on one more is not served; once one of them
// closes, it is.
func TestEndpointHoldsBoundedConnections(t *testing.T) {
	c := &countingJournal{}
	s, err := metrics.New(c, "test").Listen("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	defer s.Close()
	var idle []net.Conn
	for range metrics.DefaultMaxConns {
		conn, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		idle = append(idle, conn)
	}
	answered := make(chan int, 1)
	go func() {
		resp, err := http.Get("http://" + s.Addr() + "/metrics")
		if err != nil {
			answered <- 0
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	// However slow the machine, a scrape past the limit is never served
	// while the limit holds; this wait can only miss a broken limit.
	time.Sleep(300 * time.Millisecond)
	if n := c.reads.Load(); n != 0 {
		t.Fatalf("a scrape was served with %d connections already open", metrics.DefaultMaxConns)
	}
	idle[0].Close()
	select {
	case code := <-answered:
		if code != http.StatusOK {
			t.Fatalf("the scrape, once a connection closed: %d", code)
		}
	case <-time.After(testutil.WaitBound):
		t.Fatal("the scrape was never served after a connection closed")
	}
}
