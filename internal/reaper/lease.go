package reaper

// Lease mode's calls on one sandbox: ApplyLease when it is observed,
// EndLease when it is handed back.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/provider"
)

// DefaultLeaseSettle is how long ApplyLease waits between its renewal and
// the short auto-stop: Daytona takes a renewal into its auto-stop check
// only at its next flush, within 10 s (sandbox-activity.service.ts:75 at
// v0.190.0). A sandbox observed long after its last activity would
// otherwise be stopped by a check that runs before the renewal is seen.
const DefaultLeaseSettle = 10 * time.Second

// Lease is what lease mode sets on an observed sandbox.
type Lease struct {
	// Minutes is the auto-stop interval; required (>= 1).
	Minutes int
	// Settle: default DefaultLeaseSettle (tests speed it up with the minute).
	Settle time.Duration
}

// ApplyLease puts an observed intent's sandbox under lease mode: it reads
// the sandbox and verifies it is ours (as Backstop does, correcting a
// wrong observed id), renews it, waits Settle, then sets the lease as its
// auto-stop and, when the drain would delete it (on_drain delete), an
// auto-delete of at most the lease (provider.LeaseAutoDelete: not 0 unless the
// runner made it so, so that the runner's own stop does not delete it). A
// sandbox already being deleted is left alone. It retries within ctx. From then on the renewer (internal/lease) keeps it alive.
func (r *Reaper) ApplyLease(ctx context.Context, in intent.Intent, l Lease) error {
	if l.Minutes < 1 {
		return fmt.Errorf("lease %s: %d minutes: must be at least 1", in.Name, l.Minutes)
	}
	if in.SandboxID == "" {
		return fmt.Errorf("lease %s: no sandbox observed", in.Name)
	}
	p, err := r.providerFor(in)
	if err != nil {
		return fmt.Errorf("lease %s: %w", in.Name, err)
	}
	leaser, ok := p.(provider.Leaser)
	if !ok {
		return fmt.Errorf("lease %s: provider %s cannot renew sandboxes", in.Name, p.Name())
	}
	if l.Settle <= 0 {
		l.Settle = DefaultLeaseSettle
	}
	return r.retryOnObserved(ctx, p, in, func(in intent.Intent) error { return r.leaseOnce(ctx, p, leaser, in, l) })
}

func (r *Reaper) leaseOnce(ctx context.Context, p provider.Provider, leaser provider.Leaser, in intent.Intent, l Lease) error {
	sb, err := r.readOurs(ctx, p, in, "lease")
	if err != nil {
		return err
	}
	if renamedForDeletion(in, sb) {
		return nil // its delete was accepted: nothing to keep alive
	}
	r.remember(in, sb.ID)
	if sb.AutoStopMinutes != l.Minutes {
		// The interval is about to get short: make the last activity recent
		// first, and let the provider see it.
		err = r.call(ctx, p, prioRead, provider.CallRenew, "lease: renew "+sb.ID, func(ctx context.Context) error {
			return leaser.Renew(ctx, sb.ID)
		})
		if err != nil {
			return err
		}
		if !sleep(ctx, l.Settle) {
			return fmt.Errorf("lease: sandbox %s: no time left to let its renewal settle (%s): %w", sb.ID, l.Settle, context.DeadlineExceeded)
		}
		err = r.call(ctx, p, prioDestroy, provider.CallSetter, "lease: set auto-stop of "+sb.ID, func(ctx context.Context) error {
			return p.SetAutoStop(ctx, sb.ID, l.Minutes)
		})
		if err != nil {
			return err
		}
	}
	autoDelete := provider.LeaseAutoDelete(sb.AutoDeleteMinutes, l.Minutes)
	if in.OnDrain == intent.DrainStop || autoDelete == sb.AutoDeleteMinutes {
		r.log().Info("lease applied", "intent", in.ID, "sandbox", sb.ID, "auto_stop_minutes", l.Minutes, "auto_delete_minutes", sb.AutoDeleteMinutes)
		return nil
	}
	err = r.call(ctx, p, prioDestroy, provider.CallSetter, "lease: set auto-delete of "+sb.ID, func(ctx context.Context) error {
		return leaser.SetAutoDelete(ctx, sb.ID, autoDelete)
	})
	if err == nil {
		r.log().Info("lease applied", "intent", in.ID, "sandbox", sb.ID, "auto_stop_minutes", l.Minutes, "auto_delete_minutes", autoDelete)
	}
	return err
}

// EndLease takes a sandbox out of lease mode when the runner released its
// intent as kept: the sandbox is the runner's from then on, and lease
// mode's settings would stop (and delete) it once nobody renews it. It
// gets autoStop minutes (the backstop, --daytona-autostop), auto-delete -1
// (never; Daytona's default) and the label provider.LabelKeep=true, so no
// sweep deletes it. A setting it has already is not sent again, so a
// hand-back tried again after a partial one costs only the rest. A
// foreign sandbox, or one whose delete was accepted, is left alone. It
// retries within ctx; nil means Daytona confirmed every change.
func (r *Reaper) EndLease(ctx context.Context, in intent.Intent, autoStop int) error {
	if in.SandboxID == "" {
		return nil
	}
	p, err := r.providerFor(in)
	if err != nil {
		return fmt.Errorf("end lease %s: %w", in.Name, err)
	}
	leaser, ok := p.(provider.Leaser)
	if !ok {
		return fmt.Errorf("end lease %s: provider %s has no leases", in.Name, p.Name())
	}
	base, max := orDefault(r.RetryBase, DefaultRetryBase), orDefault(r.RetryMax, DefaultRetryMax)
	for attempt := 0; ; attempt++ {
		err := r.endLeaseOnce(ctx, p, leaser, in, autoStop)
		if err == nil || errors.Is(err, ErrForeign) || errors.Is(err, provider.ErrNotFound) || provider.ConfigError(err) {
			return err
		}
		if ctx.Err() != nil || !sleep(ctx, r.backoff(attempt, base, max, err)) {
			return err
		}
	}
}

func (r *Reaper) endLeaseOnce(ctx context.Context, p provider.Provider, leaser provider.Leaser, in intent.Intent, autoStop int) error {
	sb, err := r.readOurs(ctx, p, in, "end lease")
	if err != nil {
		return err
	}
	if renamedForDeletion(in, sb) {
		return nil
	}
	if sb.AutoStopMinutes != autoStop {
		err = r.call(ctx, p, prioDestroy, provider.CallSetter, "end lease: set auto-stop of "+sb.ID, func(ctx context.Context) error {
			return p.SetAutoStop(ctx, sb.ID, autoStop)
		})
		if err != nil {
			return err
		}
	}
	if sb.AutoDeleteMinutes >= 0 {
		err = r.call(ctx, p, prioDestroy, provider.CallSetter, "end lease: set auto-delete of "+sb.ID, func(ctx context.Context) error {
			return leaser.SetAutoDelete(ctx, sb.ID, -1)
		})
		if err != nil {
			return err
		}
	}
	if err := r.markKeep(ctx, p, sb); err != nil {
		return err
	}
	r.log().Info("lease ended: the runner keeps the sandbox", "intent", in.ID, "sandbox", sb.ID, "auto_stop_minutes", autoStop, "auto_delete", "never", "label", provider.LabelKeep+"=true")
	return nil
}

// MarkKept marks the sandbox of an intent its runner released as kept
// outside lease mode provider.LabelKeep=true (markKeep), so that no sweep
// deletes it once it is old and idle: the sweep works without a journal,
// and the label is all it can tell such a sandbox by. Nothing else of the
// sandbox changes: its intervals are the runner's. A foreign sandbox, or
// one whose delete was accepted, is left alone. It retries within ctx;
// nil means the provider confirmed the label (or had it already). A
// provider without labels (provider.Labeler) cannot be marked: an error.
func (r *Reaper) MarkKept(ctx context.Context, in intent.Intent) error {
	if in.SandboxID == "" {
		return nil
	}
	p, err := r.providerFor(in)
	if err != nil {
		return fmt.Errorf("mark kept %s: %w", in.Name, err)
	}
	if _, ok := p.(provider.Labeler); !ok {
		return fmt.Errorf("mark kept %s: provider %s has no labels", in.Name, p.Name())
	}
	base, max := orDefault(r.RetryBase, DefaultRetryBase), orDefault(r.RetryMax, DefaultRetryMax)
	for attempt := 0; ; attempt++ {
		err := r.markKeptOnce(ctx, p, in)
		if err == nil || errors.Is(err, ErrForeign) || errors.Is(err, provider.ErrNotFound) || provider.ConfigError(err) {
			return err
		}
		if ctx.Err() != nil || !sleep(ctx, r.backoff(attempt, base, max, err)) {
			return err
		}
	}
}

func (r *Reaper) markKeptOnce(ctx context.Context, p provider.Provider, in intent.Intent) error {
	sb, err := r.readOurs(ctx, p, in, "mark kept")
	if err != nil {
		return err
	}
	if renamedForDeletion(in, sb) {
		return nil
	}
	if err := r.markKeep(ctx, p, sb); err != nil {
		return err
	}
	r.log().Info("released as kept: the sandbox is labelled so that no sweep deletes it", "intent", in.ID, "sandbox", sb.ID, "label", provider.LabelKeep+"=true")
	return nil
}
