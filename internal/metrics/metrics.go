// Package metrics is tether's Prometheus endpoint (tether run
// --metrics-addr): the journal's intents by state and its size; the
// intents each intake declared; the provider calls tether made, by
// provider, operation and outcome, with their latency and the rate-limit
// waits the provider asked for; how long the drain and the boot replay
// took; what they ended each provider's intents in, and the cleanup debt —
// intents a drain or replay could not resolve, each possibly a running
// sandbox; and the renewals of each provider (Daytona's leases, E2B's
// timeouts). A run that guards Daytona and E2B shows each apart under the
// provider label, whose values are few (Providers), as are each one's
// operations (OpsOf).
//
// A scrape reads memory only (the journal keeps its counts by state as
// intents change), so it costs the same on ten intents as on ten million;
// scrapes that arrive together share one rendering, at most
// DefaultMaxScrapes are served at once and the endpoint holds at most
// DefaultMaxConns connections, so a flood of scrapes costs the intakes
// little CPU and tether little memory. Every series is there from the first
// scrape: counters at 0 with every label value they can take.
//
// It records; it never changes what tether does. Off by default. It is
// written with github.com/VictoriaMetrics/metrics, whose package
// initialisation costs little: the endpoint's library is linked into every
// start, with --metrics-addr or not (docs/benchmarks.md).
package metrics

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	vm "github.com/VictoriaMetrics/metrics"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/provider"
)

// Settings of the endpoint.
const (
	// DefaultShutdownTimeout: how long Close lets a scrape in flight finish.
	DefaultShutdownTimeout = 2 * time.Second
	// DefaultMaxScrapes bounds the scrapes served at once. A scrape reads
	// memory only and takes well under a millisecond, so a few slots serve
	// any real Prometheus; a flood of them must not take the CPU the intakes
	// and the drain need.
	DefaultMaxScrapes = 4
	// DefaultScrapeWait is how long a scrape waits for a slot before it is
	// answered 503 (with Retry-After: 1).
	DefaultScrapeWait = time.Second
	// DefaultMaxConns bounds the connections the endpoint holds open; more
	// wait in the kernel's accept queue. Each costs a goroutine and its
	// buffers, so a flood of connections must not grow tether's memory.
	// Keep-alive is off: a scrape's connection is closed after it.
	DefaultMaxConns = 64
	// readHeaderTimeout keeps a client that connects and says nothing from
	// holding a connection.
	readHeaderTimeout = 10 * time.Second
)

// Journal is what the scrape reads of the journal: counts it keeps in
// memory (by the provider each intent names, "" for none, and state), and
// its file's size.
type Journal interface {
	CountsByProvider() (map[string]map[intent.State]int, error)
	Size() (int64, error)
}

// The label values every series is created with at start.
var (
	// Outcomes are what outcome names a call's result.
	Outcomes = []string{"ok", "not_found", "conflict", "rate_limited", "unauthorized", "unavailable", "refused", "canceled", "error"}
	// Intakes are the ways an intent is declared.
	Intakes = []string{"proxy", "socket", "spool"}
	// States are the journal's intent states.
	States = []intent.State{intent.Pending, intent.Observed, intent.Releasing, intent.Gone, intent.Stopped, intent.Released, intent.NeverCreated, intent.Foreign}
	// DrainStates are what a drain or replay ends an intent in (live: left).
	DrainStates = []string{string(intent.Gone), string(intent.Stopped), string(intent.Released), string(intent.NeverCreated), string(intent.Foreign), "live"}
)

// help is each family's HELP text. The library writes HELP lines without
// text; Handler puts these in (docs/operations.md has the same table).
var help = map[string]string{
	"tether_build_info":                     "tether's version and the Go it was built with (always 1).",
	"tether_intents":                        "Intents in the journal, by provider and state (pending, observed and releasing are live).",
	"tether_journal_size_bytes":             "Size of the journal file.",
	"tether_intents_declared_total":         "Intents declared since start, by intake (proxy, socket, spool); idempotent retries not counted.",
	"tether_provider_calls_total":           "Provider API calls tether made, by provider (its name, as intents journal it), operation and outcome (ok, not_found, conflict, rate_limited, unauthorized, unavailable, refused, canceled, error).",
	"tether_provider_call_duration_seconds": "Latency of provider API calls, by provider and operation, failed ones included.",
	"tether_rate_limit_waits_total":         "Provider answers of 429 (rate limited), by provider; each makes tether wait before it tries again.",
	"tether_rate_limit_wait_seconds_total":  "Sum of the waits the provider asked for in its 429 answers (Retry-After), by provider.",
	"tether_drain_duration_seconds":         "How long each drain took (after the child ended, or tether drain).",
	"tether_replay_duration_seconds":        "How long each boot replay took (the intents an earlier run left live).",
	"tether_unresolved_intents":             "Cleanup debt, by provider: intents the last drain or replay left live (at start, those an earlier run left); each may be a running sandbox.",
	"tether_drain_intents_total":            "Intents the drains and replays resolved or left, by provider and the state they ended in (live: left unresolved).",
	"tether_lease_at_risk_total":            "Renewals, by provider: times a sandbox's renewals kept failing (Daytona lease mode: for a quarter of the lease; E2B: a renewal of a capped timeout failed); the provider may end it under the live runner.",
	"tether_leased_sandboxes":               "Renewals, by provider: sandboxes tether renews now (Daytona lease mode: leases; E2B: timeouts cut to --e2b-max-timeout).",
}

// Metrics are tether's series, in a set of their own.
type Metrics struct {
	set *vm.Set
	j   Journal
	// journal is what the last scrape read of j; the gauges show it.
	journal atomic.Pointer[journalView]
	scrapes chan struct{} // a slot per scrape served at once
	// rendering is the scrape being written now; scrapes that arrive
	// meanwhile share it instead of writing their own.
	mu        sync.Mutex
	rendering *rendered

	declared map[string]*vm.Counter
	drain    *vm.PrometheusHistogram
	replay   *vm.PrometheusHistogram
	// providers are each provider's series, by its label: those named to
	// New at start, another when it is first seen (smu); a provider's
	// call series when it is wrapped (Provider: the calls it can make).
	smu       sync.Mutex
	providers map[string]*providerSeries
}

// providerSeries are the series of one provider.
type providerSeries struct {
	name        string
	calls       map[[2]string]*vm.Counter // op, outcome
	latency     map[string]*vm.PrometheusHistogram
	waits       *vm.Counter
	waitSeconds *vm.FloatCounter
	unresolved  *vm.Gauge
	drained     map[string]*vm.Counter // by DrainStates
	atRisk      *vm.Counter
	leased      *vm.Gauge
}

type rendered struct {
	done chan struct{}
	body []byte
}

type journalView struct {
	counts map[string]map[intent.State]int // by provider label
	size   int64
}

// New makes every series, at 0, each provider's for every name of
// providers (the provider label's values: every provider tether knows; an
// intent that names none is intent.DefaultProvider's); j is read at each
// scrape, version is tether's (tether_build_info). A provider's call
// series are made when it is wrapped (Provider).
func New(j Journal, version string, providers ...string) *Metrics {
	vm.ExposeMetadata(true) // TYPE lines: Prometheus needs them to tell a counter from a gauge
	s := vm.NewSet()
	m := &Metrics{set: s, j: j, scrapes: make(chan struct{}, DefaultMaxScrapes), providers: map[string]*providerSeries{}}
	m.journal.Store(&journalView{counts: map[string]map[intent.State]int{}})

	s.NewGauge(fmt.Sprintf(`tether_build_info{version=%s,goversion=%s}`, quote(version), quote(runtime.Version())), func() float64 { return 1 })
	if len(providers) == 0 {
		providers = []string{intent.DefaultProvider}
	}
	for _, p := range providers {
		for _, st := range States {
			s.NewGauge(`tether_intents{provider=`+quote(p)+`,state=`+quote(string(st))+`}`, func() float64 { return float64(m.journal.Load().counts[p][st]) })
		}
	}
	s.NewGauge("tether_journal_size_bytes", func() float64 { return float64(m.journal.Load().size) })
	m.declared = map[string]*vm.Counter{}
	for _, in := range Intakes {
		m.declared[in] = s.NewCounter(`tether_intents_declared_total{intake=` + quote(in) + `}`)
	}
	durations := []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120}
	m.drain = s.NewPrometheusHistogramExt("tether_drain_duration_seconds", durations)
	m.replay = s.NewPrometheusHistogramExt("tether_replay_duration_seconds", durations)
	for _, p := range providers {
		m.series(p)
	}
	return m
}

// series are provider name's series (a label of providerLabel), made the
// first time they are asked for.
func (m *Metrics) series(name string) *providerSeries {
	m.smu.Lock()
	defer m.smu.Unlock()
	if ps, ok := m.providers[name]; ok {
		return ps
	}
	s, pl := m.set, `provider=`+quote(name)
	ps := &providerSeries{
		name:        name,
		calls:       map[[2]string]*vm.Counter{},
		latency:     map[string]*vm.PrometheusHistogram{},
		waits:       s.NewCounter(`tether_rate_limit_waits_total{` + pl + `}`),
		waitSeconds: s.NewFloatCounter(`tether_rate_limit_wait_seconds_total{` + pl + `}`),
		unresolved:  s.NewGauge(`tether_unresolved_intents{`+pl+`}`, nil),
		drained:     map[string]*vm.Counter{},
		atRisk:      s.NewCounter(`tether_lease_at_risk_total{` + pl + `}`),
		leased:      s.NewGauge(`tether_leased_sandboxes{`+pl+`}`, nil),
	}
	for _, st := range DrainStates {
		ps.drained[st] = s.NewCounter(`tether_drain_intents_total{` + pl + `,state=` + quote(st) + `}`)
	}
	m.providers[name] = ps
	return ps
}

// addOp makes op's series: its calls by outcome, and its latency; the
// caller holds smu.
func (ps *providerSeries) addOp(s *vm.Set, op string) {
	if _, ok := ps.latency[op]; ok {
		return
	}
	pl := `provider=` + quote(ps.name) + `,op=` + quote(op)
	for _, oc := range Outcomes {
		ps.calls[[2]string{op, oc}] = s.NewCounter(`tether_provider_calls_total{` + pl + `,outcome=` + quote(oc) + `}`)
	}
	ps.latency[op] = s.NewPrometheusHistogramExt(`tether_provider_call_duration_seconds{`+pl+`}`,
		[]float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10})
}

// providerLabel is the provider label of a provider or intent named name.
func providerLabel(name string) string {
	if name == "" {
		return intent.DefaultProvider
	}
	return name
}

func quote(v string) string { return strconv.Quote(v) }

// Handler serves the metrics in the Prometheus text format, at most
// DefaultMaxScrapes at once; a scrape that finds no slot within
// DefaultScrapeWait is answered 503.
func (m *Metrics) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case m.scrapes <- struct{}{}:
		default:
			t := time.NewTimer(DefaultScrapeWait)
			select {
			case m.scrapes <- struct{}{}:
				t.Stop()
			case <-t.C:
				w.Header().Set("Retry-After", "1")
				http.Error(w, "tether: too many scrapes at once", http.StatusServiceUnavailable)
				return
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
		defer func() { <-m.scrapes }()
		body := m.render()
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = w.Write(body)
	})
}

// render writes a scrape, or waits for the one being written: scrapes that
// arrive together cost one (reading the Go runtime's statistics stops the
// world for a moment, and the proxy's creates wait for it).
func (m *Metrics) render() []byte {
	m.mu.Lock()
	if r := m.rendering; r != nil {
		m.mu.Unlock()
		<-r.done
		return r.body
	}
	r := &rendered{done: make(chan struct{})}
	m.rendering = r
	m.mu.Unlock()
	var buf bytes.Buffer
	m.write(&buf)
	r.body = buf.Bytes()
	m.mu.Lock()
	m.rendering = nil
	m.mu.Unlock()
	close(r.done)
	return r.body
}

// write writes one scrape: the journal read once (from memory), tether's
// series with their HELP text, then the Go runtime's and the process's.
func (m *Metrics) write(buf *bytes.Buffer) {
	v := &journalView{}
	if c, err := m.j.CountsByProvider(); err == nil {
		v.counts = byLabel(c)
	} else {
		v.counts = m.journal.Load().counts // closed at exit: the last known
	}
	if n, err := m.j.Size(); err == nil {
		v.size = n
	} else {
		v.size = m.journal.Load().size
	}
	m.journal.Store(v)

	var own bytes.Buffer
	m.set.WritePrometheus(&own)
	for line := range bytes.Lines(own.Bytes()) {
		if name, ok := bytes.CutPrefix(bytes.TrimSuffix(line, []byte("\n")), []byte("# HELP ")); ok {
			if h, ok := help[string(name)]; ok {
				fmt.Fprintf(buf, "# HELP %s %s\n", name, h)
				continue
			}
		}
		buf.Write(line)
	}
	vm.WriteGoMetrics(buf)
	vm.WriteProcMetrics(buf)
}

// byLabel is the journal's counts by provider label: an intent that names
// no provider is Daytona's.
func byLabel(c map[string]map[intent.State]int) map[string]map[intent.State]int {
	out := make(map[string]map[intent.State]int, len(c))
	for name, n := range c {
		l := providerLabel(name)
		if out[l] == nil {
			out[l] = make(map[intent.State]int, len(n))
		}
		for st, k := range n {
			out[l][st] += k
		}
	}
	return out
}

// Server serves GET /metrics on l until Close.
type Server struct {
	srv *http.Server
	l   net.Listener
}

// Listen opens addr (host:port) for the endpoint.
func (m *Metrics) Listen(addr string, log *slog.Logger) (*Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: readHeaderTimeout}
	srv.SetKeepAlivesEnabled(false)
	if log != nil {
		srv.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelDebug)
	}
	return &Server{srv: srv, l: &limitListener{Listener: l, slots: make(chan struct{}, DefaultMaxConns)}}, nil
}

// limitListener holds at most cap(slots) connections open: Accept waits
// for a slot, and a connection's Close frees it.
type limitListener struct {
	net.Listener
	slots chan struct{}
}

func (l *limitListener) Accept() (net.Conn, error) {
	l.slots <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &slotConn{Conn: c, free: func() { <-l.slots }}, nil
}

type slotConn struct {
	net.Conn
	once sync.Once
	free func()
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.free)
	return err
}

// Addr is where the endpoint listens (with the port chosen for port 0).
func (s *Server) Addr() string { return s.l.Addr().String() }

// Serve answers scrapes until Close; it returns nil after Close.
func (s *Server) Serve() error {
	err := s.srv.Serve(s.l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close stops the endpoint, letting a scrape in flight finish.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultShutdownTimeout)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		return s.srv.Close()
	}
	return nil
}

// RecordDrain records a drain's duration and outcome.
func (m *Metrics) RecordDrain(rep reaper.Report) {
	m.drain.Update(rep.Elapsed.Seconds())
	m.recordReport(rep)
}

// RecordReplay records a boot replay's duration and outcome.
func (m *Metrics) RecordReplay(elapsed time.Duration, rep reaper.Report) {
	m.replay.Update(elapsed.Seconds())
	m.recordReport(rep)
}

// recordReport counts what the drain ended each provider's intents in,
// and sets each provider's cleanup debt to what it left live.
func (m *Metrics) recordReport(rep reaper.Report) {
	byLabel := map[string]reaper.Tally{}
	for name, t := range rep.ByProvider {
		l := providerLabel(name)
		sum := byLabel[l]
		sum.Gone += t.Gone
		sum.Stopped += t.Stopped
		sum.Released += t.Released
		sum.NeverCreated += t.NeverCreated
		sum.Foreign += t.Foreign
		sum.Live += t.Live
		byLabel[l] = sum
	}
	live := map[string]int{}
	for l, t := range byLabel {
		ps := m.series(l)
		for state, n := range map[string]int{
			string(intent.Gone): t.Gone, string(intent.Stopped): t.Stopped, string(intent.Released): t.Released,
			string(intent.NeverCreated): t.NeverCreated, string(intent.Foreign): t.Foreign, "live": t.Live,
		} {
			ps.drained[state].Add(n)
		}
		live[l] = t.Live
	}
	m.SetUnresolved(live)
}

// SetUnresolved sets each provider's cleanup debt (e.g. at start: what an
// earlier run left), by the provider its intents name ("" for Daytona); a
// provider not in live has none.
func (m *Metrics) SetUnresolved(live map[string]int) {
	byLabel := map[string]int{}
	for name, n := range live {
		byLabel[providerLabel(name)] += n
	}
	for l := range byLabel {
		m.series(l)
	}
	m.smu.Lock()
	defer m.smu.Unlock()
	for l, ps := range m.providers {
		ps.unresolved.Set(float64(byLabel[l]))
	}
}

// Declared counts one intent declared through intake (one of Intakes).
func (m *Metrics) Declared(intake string) {
	if c, ok := m.declared[intake]; ok {
		c.Inc()
	}
}

// outcome names a provider call's result for the outcome label.
func outcome(err error) string {
	var rl *provider.RateLimitError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &rl), errors.Is(err, provider.ErrRateLimited):
		return "rate_limited"
	case errors.Is(err, provider.ErrNotFound):
		return "not_found"
	case errors.Is(err, provider.ErrConflict):
		return "conflict"
	case errors.Is(err, provider.ErrUnauthorized):
		return "unauthorized"
	case errors.Is(err, provider.ErrUnavailable):
		return "unavailable"
	case errors.Is(err, provider.ErrRefused), errors.Is(err, provider.ErrNotStoppable), errors.Is(err, provider.ErrErrored):
		return "refused"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	}
	return "error"
}

// recordCall counts one call of op (one of Ops) to provider name, by its
// outcome, and its latency.
func (m *Metrics) recordCall(name, op string, start time.Time, err error) {
	ps := m.series(name)
	oc := outcome(err)
	m.smu.Lock()
	c, ok := ps.calls[[2]string{op, oc}]
	if !ok {
		ps.addOp(m.set, op) // an op Ops does not list: its series from now on
		c = ps.calls[[2]string{op, oc}]
	}
	h := ps.latency[op]
	m.smu.Unlock()
	h.Update(time.Since(start).Seconds())
	c.Inc()
	var rl *provider.RateLimitError
	if errors.As(err, &rl) {
		ps.waits.Inc()
		ps.waitSeconds.Add(rl.RetryAfter.Seconds())
	} else if errors.Is(err, provider.ErrRateLimited) {
		ps.waits.Inc()
	}
}
