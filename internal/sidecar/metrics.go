package sidecar

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tether-run/tether/internal/metrics"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/provider"
)

// startMetrics serves --metrics-addr (when set) from before the child
// starts until tether exits, the drain and --metrics-linger included, and
// returns set with each provider counted and timed. With the setting empty
// it changes nothing.
func (sc *Sidecar) startMetrics(set provider.Set) (provider.Set, error) {
	if sc.cfg.MetricsAddr == "" {
		return set, nil
	}
	sc.metrics = metrics.New(sc.journal, sc.version, sc.opened.Names()...)
	srv, err := sc.metrics.Listen(sc.cfg.MetricsAddr, sc.log.With("component", "metrics"))
	if err != nil {
		return set, fmt.Errorf("--metrics-addr %s: %w", sc.cfg.MetricsAddr, err)
	}
	sc.metricsServer = srv
	go func() {
		if err := srv.Serve(); err != nil {
			sc.log.Error("metrics endpoint failed", "addr", srv.Addr(), "err", err)
		}
	}()
	sc.log.Info("serving metrics", "addr", srv.Addr(), "path", "/metrics")
	return set.Map(sc.metrics.Provider), nil
}

// declared counts the intents an intake declares (nil without metrics).
// component is the intake's logger name (withLogger).
func (sc *Sidecar) declared(component string) func() {
	if sc.metrics == nil {
		return nil
	}
	intake := map[string]string{"api": "socket", "spool": "spool"}[component]
	if intake == "" {
		intake = "proxy" // a provider's API proxy
	}
	return func() { sc.metrics.Declared(intake) }
}

// linger keeps the endpoint up for --metrics-linger once the drain is over,
// so that a scrape can read the drain's series before tether exits (they
// are written at its end). Run's context ending, or a TERM or INT, ends it
// at once.
func (sc *Sidecar) linger(ctx context.Context) {
	if sc.metricsServer == nil || sc.cfg.MetricsLinger <= 0 {
		return
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(stop)
	t := time.NewTimer(sc.cfg.MetricsLinger)
	defer t.Stop()
	sc.log.Info("metrics: the drain is over; the endpoint stays up before tether exits",
		"addr", sc.metricsServer.Addr(), "linger", sc.cfg.MetricsLinger)
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-stop:
	}
}

// stopMetrics closes the endpoint (after the drain).
func (sc *Sidecar) stopMetrics() {
	if sc.metricsServer != nil {
		sc.metricsServer.Close()
	}
}

// replay is the boot replay, timed, with the cleanup debt it leaves.
func (sc *Sidecar) replay(ctx context.Context, left []string) {
	if sc.metrics != nil && len(left) > 0 {
		sc.metrics.SetUnresolved(sc.liveByProvider(left))
	}
	rep := sc.reaper.Replay(ctx, left)
	if sc.metrics == nil || len(left) == 0 || ctx.Err() != nil || sc.reaper.Providers.Len() == 0 {
		return // cut short, or nothing tried: the drain that follows reports
	}
	sc.metrics.RecordReplay(rep.Elapsed, rep)
}

// recordDrain records the drain's report. A drain that had no provider
// tried none of the live intents: they are counted by the provider each
// names from the journal's counts (kept in memory).
func (sc *Sidecar) recordDrain(rep reaper.Report) {
	if rep.NotTried > 0 {
		rep.ByProvider = map[string]reaper.Tally{}
		counts, err := sc.journal.CountsByProvider()
		if err != nil {
			sc.log.Warn("metrics: the journal's counts could not be read; the cleanup debt is not set by provider", "err", err)
		}
		for name, n := range counts {
			live := 0
			for st, k := range n {
				if st.Live() {
					live += k
				}
			}
			rep.ByProvider[name] = reaper.Tally{Live: live}
		}
	}
	sc.metrics.RecordDrain(rep)
}

// liveByProvider is the live intents of ids (what an earlier run left) by
// the provider each names: one read of the journal's live intents, at
// start, with --metrics-addr only.
func (sc *Sidecar) liveByProvider(ids []string) map[string]int {
	only := make(map[string]bool, len(ids))
	for _, id := range ids {
		only[id] = true
	}
	live, err := sc.journal.Live()
	if err != nil {
		sc.log.Warn("metrics: the live intents could not be read; the cleanup debt is not set", "err", err)
		return nil
	}
	n := map[string]int{}
	for _, in := range live {
		if !only[in.ID] {
			continue
		}
		n[in.Provider]++
	}
	return n
}
