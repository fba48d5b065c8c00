package sidecar

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tether-run/tether/internal/config"
	"github.com/tether-run/tether/internal/lease"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/spool"
	"github.com/tether-run/tether/supervisor"
)

// openLease turns lease mode on when it is asked for (--lease) and can
// run: without a provider there is nothing to renew with, which is said
// once, at start.
func (sc *Sidecar) openLease() {
	if sc.cfg.Lease <= 0 {
		return
	}
	if sc.providers.Daytona == nil {
		sc.log.Warn("lease mode needs Daytona credentials; it is off for this run", "setting", "--lease", "env", config.EnvLease)
		return
	}
	sc.lease = &lease.Policy{
		Reaper: leaseReaper{
			Reaper: sc.reaper,
			lease:  reaper.Lease{Minutes: sc.cfg.Lease, Settle: sc.scaledMinute(reaper.DefaultLeaseSettle)},
		},
		Journal:     sc.journal,
		AutoStop:    sc.cfg.DaytonaAutoStop,
		CallTimeout: backstopTimeout,
		Settle:      sc.scaledMinute(reaper.DefaultLeaseSettle),
		Logger:      sc.log.With("component", "lease"),
	}
	sc.log.Info("lease mode", "auto_stop_minutes", sc.cfg.Lease, "renew_every", time.Duration(float64(sc.cfg.LeaseDuration())*lease.DefaultPeriodShare).Round(time.Millisecond))
}

// scaledMinute turns a duration of Daytona's in real minutes into tether's
// minute (TETHER_LEASE_MINUTE, a minute but in tests).
func (sc *Sidecar) scaledMinute(d time.Duration) time.Duration {
	return time.Duration(float64(d) * float64(sc.cfg.LeaseMinute) / float64(time.Minute))
}

// leaseReaper is the reaper as lease mode's policy asks for it.
type leaseReaper struct {
	*reaper.Reaper
	lease reaper.Lease
}

func (r leaseReaper) ApplyLease(ctx context.Context, in spool.Intent) error {
	err := r.Reaper.ApplyLease(ctx, in, r.lease)
	if errors.Is(err, reaper.ErrForeign) || errors.Is(err, provider.ErrNotFound) {
		return fmt.Errorf("%w: %w", lease.ErrNotOurs, err)
	}
	return err
}

// leaseActor renews every observed sandbox while the child runs.
func (sc *Sidecar) leaseActor() supervisor.Actor {
	r := &lease.Renewer{
		Journal:    sc.journal,
		Provider:   sc.reaper.Provider,
		Lease:      sc.cfg.LeaseDuration(),
		MinSpacing: sc.scaledMinute(lease.DefaultMinSpacing),
		Logger:     sc.log.With("component", "lease"),
		Kept:       sc.lease.Kept,
	}
	if sc.metrics != nil {
		r.Observer = sc.metrics
	}
	sc.lease.Start()
	ctx, stop := context.WithCancel(context.Background())
	return supervisor.Actor{Name: "lease", Execute: func() error {
		if err := r.Run(ctx); err != nil {
			sc.log.Error("lease mode: no renewals; sandboxes will be stopped by their short auto-stop under the live runner", "err", err)
			<-ctx.Done() // an actor that returns would end the group
		}
		return nil
	}, Interrupt: func(error) { stop() }}
}

// endKeptLeases ends, under ctx (the drain deadline), the leases of
// sandboxes released as kept that the renewer had no time to see. The
// returned channel is closed when it is done.
func (sc *Sidecar) endKeptLeases(ctx context.Context) <-chan struct{} {
	if sc.lease == nil {
		done := make(chan struct{})
		close(done)
		return done
	}
	return sc.lease.EndKept(ctx)
}
