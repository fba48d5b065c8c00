package main

import (
	"context"
	"fmt"
	"time"

	"github.com/tether-run/tether/internal/metrics"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/spool"
)

// startMetrics serves --metrics-addr (when set) from before the child
// starts until tether exits, the drain included, and returns prov counted
// and timed. With the setting empty it changes nothing.
func (sc *sidecar) startMetrics(prov provider.Provider) (provider.Provider, error) {
	if sc.cfg.MetricsAddr == "" {
		return prov, nil
	}
	sc.metrics = metrics.New(sc.journal)
	srv, err := sc.metrics.Listen(sc.cfg.MetricsAddr, sc.log.With("component", "metrics"))
	if err != nil {
		return prov, fmt.Errorf("--metrics-addr %s: %w", sc.cfg.MetricsAddr, err)
	}
	sc.metricsServer = srv
	go func() {
		if err := srv.Serve(); err != nil {
			sc.log.Error("metrics endpoint failed", "addr", srv.Addr(), "err", err)
		}
	}()
	sc.log.Info("serving metrics", "addr", srv.Addr(), "path", "/metrics")
	if prov == nil {
		return nil, nil
	}
	return sc.metrics.Provider(prov), nil
}

// stopMetrics closes the endpoint (after the drain).
func (sc *sidecar) stopMetrics() {
	if sc.metricsServer != nil {
		sc.metricsServer.Close()
	}
}

// replay is the boot replay, timed, with the cleanup debt it leaves.
func (sc *sidecar) replay(ctx context.Context, left []spool.Intent) {
	if sc.metrics != nil {
		sc.metrics.SetUnresolved(len(left))
	}
	start := time.Now()
	sc.reaper.Replay(ctx, left)
	if sc.metrics == nil || len(left) == 0 || ctx.Err() != nil {
		return // cut short: the drain that follows reports
	}
	sc.metrics.ObserveReplay(time.Since(start), sc.outcomeOf(left))
}

// outcomeOf is a report of where the given intents stand in the journal now.
func (sc *sidecar) outcomeOf(intents []spool.Intent) reaper.Report {
	rep := reaper.Report{Total: len(intents)}
	for _, in := range intents {
		if cur, err := sc.journal.Get(in.ID); err == nil {
			in = cur
		}
		it := reaper.Item{Name: in.Name, ID: in.ID, SandboxID: in.SandboxID, State: in.State, LastError: in.LastError}
		switch in.State {
		case spool.Gone:
			rep.Gone++
		case spool.Stopped:
			rep.Stopped++
		case spool.Released:
			rep.Released++
		case spool.NeverCreated:
			rep.NeverCreated++
		case spool.Foreign:
			rep.Foreign = append(rep.Foreign, it)
		default:
			rep.Unresolved = append(rep.Unresolved, it)
		}
	}
	return rep
}
