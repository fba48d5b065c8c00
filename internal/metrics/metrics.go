// Package metrics is tether's Prometheus endpoint (tether run
// --metrics-addr): the journal's intents by state and size, read at each
// scrape; the provider calls tether made, by operation and outcome, with
// their latency and the rate-limit waits the provider asked for; how long
// the drain and the boot replay took; and the cleanup debt — intents a
// drain or replay could not resolve, each possibly a running sandbox.
//
// It observes; it never changes what tether does. Off by default.
package metrics

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/spool"
)

// Settings of the endpoint.
const (
	// DefaultShutdownTimeout: how long Close lets a scrape in flight finish.
	DefaultShutdownTimeout = 2 * time.Second
	// readHeaderTimeout keeps a client that connects and says nothing from
	// holding a connection.
	readHeaderTimeout = 10 * time.Second
)

// Journal is what the scrape reads of the journal.
type Journal interface {
	CountByState() (map[spool.State]int, error)
	Size() (int64, error)
}

// Metrics are tether's collectors, on a registry of their own.
type Metrics struct {
	reg *prometheus.Registry

	calls       *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	waits       prometheus.Counter
	waitSeconds prometheus.Counter
	drain       prometheus.Histogram
	replay      prometheus.Histogram
	unresolved  prometheus.Gauge
	drainsLeft  *prometheus.CounterVec
	lease       *leaseMetrics // lease.go
}

// New makes the collectors; j is read at each scrape.
func New(j Journal) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	durations := []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120}
	m.calls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tether_provider_calls_total",
		Help: "Provider API calls tether made, by provider (daytona, e2b), operation and outcome (ok, not_found, conflict, rate_limited, unauthorized, unavailable, refused, canceled, error).",
	}, []string{"provider", "op", "outcome"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "tether_provider_call_duration_seconds",
		Help:    "Latency of provider API calls, by provider and operation, failed ones included.",
		Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
	}, []string{"provider", "op"})
	m.waits = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tether_rate_limit_waits_total",
		Help: "Provider answers of 429 (rate limited); each makes tether wait before it tries again.",
	})
	m.waitSeconds = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tether_rate_limit_wait_seconds_total",
		Help: "Sum of the waits the provider asked for in its 429 answers (Retry-After).",
	})
	m.drain = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "tether_drain_duration_seconds", Help: "How long each drain took (after the child ended, or tether drain).", Buckets: durations,
	})
	m.replay = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "tether_replay_duration_seconds", Help: "How long each boot replay took (the intents an earlier run left live).", Buckets: durations,
	})
	m.unresolved = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tether_unresolved_intents",
		Help: "Cleanup debt: intents the last drain or replay left live (at start, those an earlier run left); each may be a running sandbox.",
	})
	m.drainsLeft = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tether_drain_intents_total",
		Help: "Intents the drains and replays resolved or left, by the state they ended in (live: left unresolved).",
	}, []string{"state"})
	m.lease = newLeaseMetrics()
	m.reg.MustRegister(m.lease.collectors()...)
	m.reg.MustRegister(m.calls, m.latency, m.waits, m.waitSeconds, m.drain, m.replay, m.unresolved, m.drainsLeft,
		&journalCollector{j: j},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
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
	if log != nil {
		srv.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelDebug)
	}
	return &Server{srv: srv, l: l}, nil
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

// ObserveDrain records a drain's duration and outcome.
func (m *Metrics) ObserveDrain(rep reaper.Report) {
	m.drain.Observe(rep.Elapsed.Seconds())
	m.observeReport(rep)
}

// ObserveReplay records a boot replay's duration and outcome.
func (m *Metrics) ObserveReplay(elapsed time.Duration, rep reaper.Report) {
	m.replay.Observe(elapsed.Seconds())
	m.observeReport(rep)
}

func (m *Metrics) observeReport(rep reaper.Report) {
	m.unresolved.Set(float64(rep.Live()))
	for state, n := range map[string]int{
		string(spool.Gone): rep.Gone, string(spool.Stopped): rep.Stopped, string(spool.Released): rep.Released,
		string(spool.NeverCreated): rep.NeverCreated, string(spool.Foreign): len(rep.Foreign), "live": rep.Live(),
	} {
		m.drainsLeft.WithLabelValues(state).Add(float64(n))
	}
}

// SetUnresolved sets the cleanup debt (e.g. at start: what an earlier run left).
func (m *Metrics) SetUnresolved(n int) { m.unresolved.Set(float64(n)) }

// journalCollector reads the journal at each scrape.
type journalCollector struct{ j Journal }

var (
	descIntents = prometheus.NewDesc("tether_intents", "Intents in the journal, by state (pending, observed and releasing are live).", []string{"state"}, nil)
	descSize    = prometheus.NewDesc("tether_journal_size_bytes", "Size of the journal file.", nil, nil)
	allStates   = []spool.State{spool.Pending, spool.Observed, spool.Releasing, spool.Gone, spool.Stopped, spool.Released, spool.NeverCreated, spool.Foreign}
)

func (c *journalCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descIntents
	ch <- descSize
}

func (c *journalCollector) Collect(ch chan<- prometheus.Metric) {
	if counts, err := c.j.CountByState(); err != nil {
		ch <- prometheus.NewInvalidMetric(descIntents, err)
	} else {
		for _, s := range allStates {
			ch <- prometheus.MustNewConstMetric(descIntents, prometheus.GaugeValue, float64(counts[s]), string(s))
		}
	}
	if n, err := c.j.Size(); err != nil {
		ch <- prometheus.NewInvalidMetric(descSize, err)
	} else {
		ch <- prometheus.MustNewConstMetric(descSize, prometheus.GaugeValue, float64(n))
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

// observe records one call.
func (m *Metrics) observe(prov, op string, start time.Time, err error) {
	m.latency.WithLabelValues(prov, op).Observe(time.Since(start).Seconds())
	m.calls.WithLabelValues(prov, op, outcome(err)).Inc()
	var rl *provider.RateLimitError
	if errors.As(err, &rl) {
		m.waits.Inc()
		m.waitSeconds.Add(rl.RetryAfter.Seconds())
	} else if errors.Is(err, provider.ErrRateLimited) {
		m.waits.Inc()
	}
}
