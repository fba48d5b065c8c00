package sidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/config"
	"github.com/tether-run/tether/internal/lease"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/daytona"
	"github.com/tether-run/tether/supervisor"
)

// openLease makes the policy that hands kept sandboxes back (every run
// with a provider resumes the hand-backs its journal still holds, lease
// mode or not), and turns lease mode on when it is asked for (--lease) and
// can run: without a provider there is nothing to renew with, which is
// said once, at start.
func (sc *Sidecar) openLease() {
	if sc.providers.Daytona == nil {
		if sc.cfg.Lease > 0 {
			sc.log.Warn("lease mode needs Daytona credentials; it is off for this run", "setting", "--lease", "env", config.EnvLease)
		}
		return
	}
	sc.keep = newPolicy(sc.cfg, sc.reaper, sc.journal, sc.log)
	if sc.cfg.Lease <= 0 {
		return
	}
	sc.lease = sc.keep
	sc.intake.Lease = sc.cfg.Lease
	sc.log.Info("lease mode", "auto_stop_minutes", sc.cfg.Lease, "renew_every", time.Duration(float64(sc.cfg.LeaseDuration())*lease.DefaultPeriodShare).Round(time.Millisecond))
}

// newPolicy is lease mode's policy over reaper r (for `tether drain`, only
// its hand-backs of kept sandboxes).
func newPolicy(cfg config.Config, r *reaper.Reaper, j *journal.Journal, log *slog.Logger) *lease.Policy {
	settle := time.Duration(float64(reaper.DefaultLeaseSettle) * float64(cfg.LeaseMinute) / float64(time.Minute))
	return &lease.Policy{
		Reaper: leaseReaper{
			Reaper: r,
			lease:  reaper.Lease{Minutes: cfg.Lease, Settle: settle},
		},
		Journal:     j,
		AutoStop:    cfg.DaytonaAutoStop,
		CallTimeout: backstopTimeout,
		Settle:      settle,
		Logger:      log.With("component", "lease"),
	}
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

func (r leaseReaper) ApplyLease(ctx context.Context, in intent.Intent) error {
	return notOurs(r.Reaper.ApplyLease(ctx, in, r.lease))
}

func (r leaseReaper) EndLease(ctx context.Context, in intent.Intent, autoStop int) error {
	return notOurs(r.Reaper.EndLease(ctx, in, autoStop))
}

// notOurs says lease.ErrNotOurs for a sandbox that is not ours or is gone.
func notOurs(err error) error {
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
		Rescue:     sc.cfg.DaytonaAutoStop,
		Restore:    sc.lease.Apply,
	}
	if sc.metrics != nil {
		r.Observer = sc.metrics.Lease(daytona.ProviderName)
	}
	ctx, stop := context.WithCancel(context.Background())
	return supervisor.Actor{Name: "lease", Execute: func() error {
		if err := r.Run(ctx); err != nil {
			sc.log.Error("lease mode: no renewals; sandboxes will be stopped by their short auto-stop under the live runner", "err", err)
			<-ctx.Done() // an actor that returns would end the group
		}
		return nil
	}, Interrupt: func(error) { stop() }}
}

// endKeptLeases waits, under ctx (the drain deadline), for the hand-back
// of every sandbox released as kept not confirmed yet (those the renewer
// had no time to see among them). The returned channel is closed when it
// is done.
func (sc *Sidecar) endKeptLeases(ctx context.Context) <-chan struct{} {
	if sc.keep == nil {
		done := make(chan struct{})
		close(done)
		return done
	}
	return sc.keep.EndKept(ctx)
}
