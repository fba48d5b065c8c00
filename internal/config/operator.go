package config

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Operator holds the settings of what runs around the core: the metrics
// endpoint of tether run, and tether sweep.
type Operator struct {
	// MetricsAddr is the host:port the Prometheus endpoint listens on
	// (GET /metrics); empty turns it off.
	MetricsAddr string
	// MetricsLinger keeps the endpoint up this long after the drain before
	// tether exits, so a scrape can still read the drain's series; 0: exit
	// at once. At most MaxMetricsLinger.
	MetricsLinger time.Duration

	// Sweep: which sandboxes of the account are stale, and how fast to go.
	SweepOwner       string        // only sandboxes with tether-owner=SweepOwner; empty: any owner
	SweepOlderThan   time.Duration // created longer ago than this
	SweepIdleFor     time.Duration // and idle (Daytona's lastActivityAt) longer than this
	SweepConcurrency int           // provider calls in flight
	SweepTimeout     time.Duration // deadline of the whole sweep
	// SweepPush is the Pushgateway job URL a sweep pushes its outcome to
	// (its provider added as a grouping label); empty: no push.
	SweepPush string
}

// MaxMetricsLinger bounds --metrics-linger: tether's exit (and whatever
// restarts it, or stops its container) waits for it, so a linger must stay
// short; a Prometheus scraping every 15 s catches one within 30 s.
const MaxMetricsLinger = time.Minute

// Groups of the operator settings (bound only when asked for by name).
const (
	// Metrics: the Prometheus endpoint (tether run).
	Metrics Group = Log << (iota + 1)
	// Sweep: tether sweep's rule and pace, with the scope labels (--label).
	Sweep
)

// Env names of the operator settings.
const (
	EnvMetricsAddr      = "TETHER_METRICS_ADDR"
	EnvMetricsLinger    = "TETHER_METRICS_LINGER"
	EnvSweepOwner       = "TETHER_SWEEP_OWNER"
	EnvSweepOlderThan   = "TETHER_SWEEP_OLDER_THAN"
	EnvSweepIdleFor     = "TETHER_SWEEP_IDLE_FOR"
	EnvSweepConcurrency = "TETHER_SWEEP_CONCURRENCY"
	EnvSweepTimeout     = "TETHER_SWEEP_TIMEOUT"
	EnvSweepPush        = "TETHER_SWEEP_METRICS_PUSH"
)

// Defaults of a sweep.
const (
	// DefaultSweepOlderThan: only sandboxes created longer ago are swept.
	DefaultSweepOlderThan = 24 * time.Hour
	// DefaultSweepIdleFor: only sandboxes idle (no activity the provider
	// saw) for longer are swept.
	DefaultSweepIdleFor = 2 * time.Hour
	// DefaultSweepConcurrency: provider calls in flight during a sweep.
	// Lower than the drain's: nothing is waiting, and the account's rate
	// limits are shared with the runners that are still working.
	DefaultSweepConcurrency = 8
	// DefaultSweepTimeout bounds a whole sweep: the listing, the deletes
	// and their confirmations.
	DefaultSweepTimeout = 10 * time.Minute
)

func defaultOperator() Operator {
	return Operator{
		SweepOlderThan:   DefaultSweepOlderThan,
		SweepIdleFor:     DefaultSweepIdleFor,
		SweepConcurrency: DefaultSweepConcurrency,
		SweepTimeout:     DefaultSweepTimeout,
	}
}

func (c *Config) bindOperator(b *binder, want Group) {
	if want&Metrics != 0 {
		b.string(&c.MetricsAddr, "metrics-addr", EnvMetricsAddr, "host:port to serve Prometheus metrics on (GET /metrics); empty: off")
		b.duration(&c.MetricsLinger, "metrics-linger", EnvMetricsLinger, "keep the metrics endpoint up this long after the drain, so a scrape sees the drain's series (at most 1m; tether exits after it)")
	}
	if want&Sweep != 0 {
		b.string(&c.SweepOwner, "owner", EnvSweepOwner, "sweep only sandboxes with this tether-owner (one journal's owner id); empty: every owner")
		b.duration(&c.SweepOlderThan, "older-than", EnvSweepOlderThan, "sweep only sandboxes created longer ago than this")
		b.duration(&c.SweepIdleFor, "idle-for", EnvSweepIdleFor, "sweep only sandboxes idle for longer than this (Daytona's last activity; on E2B only a paused sandbox, idle since it was paused)")
		b.int(&c.SweepConcurrency, "concurrency", EnvSweepConcurrency, "provider calls in flight during the sweep")
		b.duration(&c.SweepTimeout, "timeout", EnvSweepTimeout, "deadline of the whole sweep")
		b.string(&c.SweepPush, "metrics-push", EnvSweepPush, "Pushgateway job URL to push the sweep's outcome to (e.g. http://pushgateway:9091/metrics/job/tether_sweep; the provider is added as a grouping label); empty: no push")
		if want&Intake == 0 {
			b.labels(c.Labels, "scope label k=v every swept sandbox must carry; repeatable")
		}
	}
}

// labels binds --label and $TETHER_LABELS into m.
func (b *binder) labels(m map[string]string, usage string) {
	if v, ok := os.LookupEnv(EnvLabels); ok && v != "" {
		labels, err := ParseLabels(v)
		if err != nil {
			b.errs = append(b.errs, fmt.Errorf("%s: %w", EnvLabels, err))
		}
		for k, v := range labels {
			m[k] = v
		}
	}
	b.fs.Var(labelFlag{m}, "label", usage+" ($"+EnvLabels+", comma-separated)")
}

func (c *Config) validateOperator() []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.MetricsAddr != "" {
		if _, port, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			bad("--metrics-addr %q: want host:port (e.g. :9464 or 127.0.0.1:9464)", c.MetricsAddr)
		} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			bad("--metrics-addr %q: port %q: want a number from 0 to 65535", c.MetricsAddr, port)
		}
	}
	if c.MetricsLinger < 0 || c.MetricsLinger > MaxMetricsLinger {
		bad("--metrics-linger %s: must be between 0 and %s", c.MetricsLinger, MaxMetricsLinger)
	}
	if c.SweepOlderThan <= 0 {
		bad("--older-than %s: must be positive", c.SweepOlderThan)
	}
	if c.SweepIdleFor <= 0 {
		bad("--idle-for %s: must be positive", c.SweepIdleFor)
	}
	if c.SweepConcurrency < 1 || c.SweepConcurrency > 1024 {
		bad("--concurrency %d: must be between 1 and 1024", c.SweepConcurrency)
	}
	if c.SweepTimeout <= 0 {
		bad("--timeout %s: must be positive", c.SweepTimeout)
	}
	if c.SweepPush != "" {
		u, err := url.Parse(c.SweepPush)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || !strings.Contains(u.Path, "/metrics/job/") {
			bad("--metrics-push: want the Pushgateway's job URL, http(s)://HOST:PORT/metrics/job/<job> (e.g. http://pushgateway:9091/metrics/job/tether_sweep)")
		}
	}
	return errs
}
