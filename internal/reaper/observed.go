package reaper

// The steps on a newly observed sandbox: Vouch (the proxy's answer as
// proof), the auto-stop Backstop, and RetryOnObserved, which retries such a
// step and corrects a mistyped observed id by name.

import (
	"context"
	"errors"
	"fmt"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/provider"
)

// Vouch takes sb, the provider's own answer to the create of in's sandbox
// (the Daytona API proxy reads it), as the read that proves the sandbox
// ours, as the backstop's read would: when it matches the intent (id,
// name, every label), a drain deletes it without reading it first. It
// changes nothing in the journal.
func (r *Reaper) Vouch(in intent.Intent, sb provider.Sandbox) error {
	if in.SandboxID == "" || sb.ID != in.SandboxID {
		return fmt.Errorf("vouch: sandbox %s is not the intent's observed %q", sb.ID, in.SandboxID)
	}
	if why := mismatch(in, sb); why != "" {
		return fmt.Errorf("vouch: sandbox %s: %w: %s", sb.ID, ErrForeign, why)
	}
	r.remember(in, sb.ID)
	return nil
}

// Backstop enforces the provider-side auto-stop on an observed intent's
// sandbox: it reads the sandbox, verifies it is ours, and sets auto-stop to
// AutoStopMinutes when it is disabled (0), so that a sandbox tether cannot
// reach in time still stops (and, if ephemeral, deletes itself). It retries
// within ctx. It changes nothing in the journal, but for a wrong observed id
// (correctObserved).
func (r *Reaper) Backstop(ctx context.Context, in intent.Intent) error {
	if r.AutoStopMinutes <= 0 {
		return nil
	}
	if in.SandboxID == "" {
		return fmt.Errorf("backstop %s: no sandbox observed", in.Name)
	}
	p, err := r.providerFor(in)
	if err != nil {
		return fmt.Errorf("backstop %s: %w", in.Name, err)
	}
	return r.retryOnObserved(ctx, p, in, func(in intent.Intent) error { return r.backstopOnce(ctx, p, in) })
}

// RetryOnObserved runs once, a step of the caller's on a newly observed
// sandbox (E2B's timeout cap), as retryOnObserved does the backstop's: again
// after a transient failure until ctx ends, and on the sandbox found by
// name when the observed id answers 404 or is not the intent's (once
// returns an error wrapping provider.ErrNotFound or ErrForeign then).
func (r *Reaper) RetryOnObserved(ctx context.Context, in intent.Intent, once func(intent.Intent) error) error {
	if in.SandboxID == "" {
		return fmt.Errorf("%s: no sandbox observed", in.Name)
	}
	p, err := r.providerFor(in)
	if err != nil {
		return fmt.Errorf("%s: %w", in.Name, err)
	}
	return r.retryOnObserved(ctx, p, in, once)
}

// retryOnObserved runs once, a step on a newly observed sandbox (the
// backstop, the lease), until it succeeds, fails for good (not ours, not
// found, a configuration error) or ctx ends, with backoff between tries. A
// first "not ours" or "not found" may mean the runner observed a wrong id:
// correctObserved looks the name up and, if it finds the intent's sandbox,
// once is tried again on it.
func (r *Reaper) retryOnObserved(ctx context.Context, p provider.Provider, in intent.Intent, once func(intent.Intent) error) error {
	base, max := orDefault(r.RetryBase, DefaultRetryBase), orDefault(r.RetryMax, DefaultRetryMax)
	corrected := false
	for attempt := 0; ; attempt++ {
		err := once(in)
		if !corrected && (errors.Is(err, ErrForeign) || errors.Is(err, provider.ErrNotFound)) {
			corrected = true
			if fixed, ok := r.correctObserved(ctx, p, in, err); ok {
				in = fixed
				continue
			}
		}
		if err == nil || errors.Is(err, ErrForeign) || errors.Is(err, provider.ErrNotFound) || provider.ConfigError(err) {
			return err
		}
		if ctx.Err() != nil || !sleep(ctx, r.backoff(attempt, base, max, err)) {
			return err
		}
	}
}

func (r *Reaper) backstopOnce(ctx context.Context, p provider.Provider, in intent.Intent) error {
	sb, err := r.readOurs(ctx, p, in, "backstop")
	if err != nil {
		return err
	}
	if !renamedForDeletion(in, sb) {
		// This read proved the id ours: a later drain deletes it without
		// reading it again.
		r.remember(in, sb.ID)
	}
	if sb.AutoStopMinutes != 0 {
		return nil
	}
	err = r.call(ctx, p, prioDestroy, provider.CallSetter, "backstop: set auto-stop of "+sb.ID, func(ctx context.Context) error {
		return p.SetAutoStop(ctx, sb.ID, r.AutoStopMinutes)
	})
	if err == nil {
		r.log().Info("auto-stop was disabled; enforced", "intent", in.ID, "sandbox", sb.ID, "minutes", r.AutoStopMinutes)
	}
	return err
}
