package main

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/tether-run/tether/internal/config"
	"github.com/tether-run/tether/internal/lease"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/spool"
	"github.com/tether-run/tether/supervisor"
)

// leaseMode reports whether tether run renews leases (--lease) and can:
// without a provider there is nothing to renew with (said once at start).
func (sc *sidecar) leaseMode() bool {
	return sc.cfg.Lease > 0 && sc.reaper.Provider != nil
}

// scaledMinute turns a duration of Daytona's in real minutes into tether's
// minute (TETHER_LEASE_MINUTE, a minute but in tests).
func (sc *sidecar) scaledMinute(d time.Duration) time.Duration {
	return time.Duration(float64(d) * float64(sc.cfg.LeaseMinute) / float64(time.Minute))
}

// applyLease puts a newly observed sandbox under lease mode (the backstop of
// lease mode: a short auto-stop rather than a long one).
func (sc *sidecar) applyLease(in spool.Intent) {
	l := reaper.Lease{Minutes: sc.cfg.Lease, Settle: sc.scaledMinute(reaper.DefaultLeaseSettle)}
	ctx, cancel := context.WithTimeout(context.Background(), backstopTimeout+l.Settle)
	defer cancel()
	err := sc.reaper.ApplyLease(ctx, in, l)
	if err == nil || errors.Is(err, reaper.ErrForeign) || errors.Is(err, provider.ErrNotFound) {
		if err != nil {
			sc.log.Warn("lease not applied", "intent", in.ID, "name", in.Name, "sandbox", in.SandboxID, "err", err)
		}
		return
	}
	sc.log.Error("lease not applied: this sandbox keeps its own auto-stop and would outlive a lost tether by that long; trying the auto-stop backstop", "intent", in.ID, "name", in.Name, "sandbox", in.SandboxID, "err", err)
	bctx, cancel := context.WithTimeout(context.Background(), backstopTimeout)
	defer cancel()
	if err := sc.reaper.Backstop(bctx, in); err != nil {
		sc.log.Warn("auto-stop backstop not applied", "intent", in.ID, "name", in.Name, "sandbox", in.SandboxID, "err", err)
	}
}

// leaseActor renews every observed sandbox while the child runs.
func (sc *sidecar) leaseActor() supervisor.Actor {
	r := &lease.Renewer{
		Journal:    sc.journal,
		Provider:   sc.reaper.Provider,
		Lease:      sc.cfg.LeaseDuration(),
		MinSpacing: sc.scaledMinute(lease.DefaultMinSpacing),
		Logger:     sc.log.With("component", "lease"),
	}
	if sc.metrics != nil {
		r.Observer = sc.metrics
	}
	r.Kept = func(in spool.Intent) {
		ctx, cancel := context.WithTimeout(context.Background(), backstopTimeout)
		defer cancel()
		sc.endLease(ctx, in)
	}
	sc.kept.Lock()
	sc.kept.since = time.Now()
	sc.kept.Unlock()
	ctx, stop := context.WithCancel(context.Background())
	return supervisor.Actor{Name: "lease", Execute: func() error {
		if err := r.Run(ctx); err != nil {
			sc.log.Error("lease mode: no renewals; sandboxes will be stopped by their short auto-stop under the live runner", "err", err)
			<-ctx.Done() // an actor that returns would end the group
		}
		return nil
	}, Interrupt: func(error) { stop() }}
}

// warnLease says at start that lease mode asked for cannot run.
func (sc *sidecar) warnLease() {
	if sc.cfg.Lease > 0 && sc.reaper.Provider == nil {
		sc.log.Warn("lease mode needs Daytona credentials; it is off for this run", "setting", "--lease", "env", config.EnvLease)
	}
	if sc.leaseMode() {
		sc.log.Info("lease mode", "auto_stop_minutes", sc.cfg.Lease, "renew_every", time.Duration(float64(sc.cfg.LeaseDuration())*lease.DefaultPeriodShare).Round(time.Millisecond))
	}
}

// keptLeases are the intents whose lease endLease ended (or is ending), so
// a kept sandbox is handed back once; since is when lease mode started.
type keptLeases struct {
	sync.Mutex
	ids   map[string]bool
	since time.Time
}

// endLease hands a sandbox the runner released as kept back to it: the
// backstop's auto-stop, auto-delete never (reaper.EndLease).
func (sc *sidecar) endLease(ctx context.Context, in spool.Intent) {
	sc.kept.Lock()
	if sc.kept.ids == nil {
		sc.kept.ids = map[string]bool{}
	}
	if sc.kept.ids[in.ID] {
		sc.kept.Unlock()
		return
	}
	sc.kept.ids[in.ID] = true
	sc.kept.Unlock()
	if err := sc.reaper.EndLease(ctx, in, sc.cfg.DaytonaAutoStop); err != nil {
		sc.log.Error("lease not ended on a sandbox the runner keeps: Daytona will stop it (and delete it if auto-delete is 0) within the lease", "intent", in.ID, "sandbox", in.SandboxID, "err", err)
	}
}

// endKeptLeases, once the child is gone, ends (beside the drain, under its
// deadline) the leases of the sandboxes released as kept in this run that
// the renewer had no time to see: a runner that releases and exits at
// once. The returned channel is closed when it is done.
func (sc *sidecar) endKeptLeases() <-chan struct{} {
	done := make(chan struct{})
	if !sc.leaseMode() {
		close(done)
		return done
	}
	all, err := sc.journal.All()
	if err != nil {
		sc.log.Warn("lease: cannot read the journal for sandboxes released as kept", "err", err)
		close(done)
		return done
	}
	sc.kept.Lock()
	since := sc.kept.since
	sc.kept.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), sc.cfg.DrainTimeout)
	var wg sync.WaitGroup
	for _, in := range all {
		if in.State != spool.Released || in.Outcome != spool.OutcomeKept || in.SandboxID == "" || in.UpdatedAt.Before(since) {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); sc.endLease(ctx, in) }()
	}
	go func() { wg.Wait(); cancel(); close(done) }()
	return done
}
