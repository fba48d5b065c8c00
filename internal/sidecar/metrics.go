package sidecar

import (
	"context"
	"fmt"

	"github.com/tether-run/tether/internal/metrics"
	"github.com/tether-run/tether/provider"
)

// startMetrics serves --metrics-addr (when set) from before the child
// starts until tether exits, the drain included, and returns provs counted
// and timed (each of provs). With the setting empty it changes nothing.
func (sc *Sidecar) startMetrics(provs []provider.Provider) ([]provider.Provider, error) {
	if sc.cfg.MetricsAddr == "" {
		return provs, nil
	}
	sc.metrics = metrics.New(sc.journal)
	srv, err := sc.metrics.Listen(sc.cfg.MetricsAddr, sc.log.With("component", "metrics"))
	if err != nil {
		return provs, fmt.Errorf("--metrics-addr %s: %w", sc.cfg.MetricsAddr, err)
	}
	sc.metricsServer = srv
	go func() {
		if err := srv.Serve(); err != nil {
			sc.log.Error("metrics endpoint failed", "addr", srv.Addr(), "err", err)
		}
	}()
	sc.log.Info("serving metrics", "addr", srv.Addr(), "path", "/metrics")
	measured := make([]provider.Provider, len(provs))
	for i, p := range provs {
		measured[i] = sc.metrics.Provider(p)
	}
	return measured, nil
}

// stopMetrics closes the endpoint (after the drain).
func (sc *Sidecar) stopMetrics() {
	if sc.metricsServer != nil {
		sc.metricsServer.Close()
	}
}

// replay is the boot replay, timed, with the cleanup debt it leaves.
func (sc *Sidecar) replay(ctx context.Context, left []string) {
	if sc.metrics != nil {
		sc.metrics.SetUnresolved(len(left))
	}
	rep := sc.reaper.Replay(ctx, left)
	if sc.metrics == nil || len(left) == 0 || ctx.Err() != nil || sc.reaper.Provider == nil {
		return // cut short, or nothing tried: the drain that follows reports
	}
	sc.metrics.ObserveReplay(rep.Elapsed, rep)
}
