package reaper

// The provider calls: every call the reaper makes goes through call, under
// the gate's bound and priorities, CallTimeout and a spent quota's wait;
// backoff and sleep are the waits between tries.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/tether-run/tether/provider"
)

// Call priorities at the gate. What stops the billing goes first: the
// delete (or stop) of a sandbox already verified, then the read that
// verifies the next one, then the reads that only confirm a deletion. A
// drain cut short by its deadline has then sent as many deletes as it
// could; what it could not confirm, the next boot confirms by the id's 404.
const (
	prioConfirm = iota
	prioRead
	prioDestroy
)

func (r *Reaper) callGate() *gate {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gate == nil {
		max := orDefault(r.Concurrency, DefaultConcurrency)
		r.gate = newGate(max, min(max, orDefault(r.MinConcurrency, DefaultMinConcurrency)), orDefault(r.ThrottledShare, DefaultThrottledShare))
	}
	return r.gate
}

// CurrentConcurrency is the provider calls the reaper lets in flight now:
// the configured Concurrency, lowered under sustained 429s.
func (r *Reaper) CurrentConcurrency() int { return r.callGate().current() }

// call runs one provider call of a kind (provider.Call*) under
// CallTimeout. A call that ran out of its own time while the caller's
// context is still alive is a hung request: reported as ErrUnavailable, so
// it is retried. When the provider knows the quota this kind of call counts
// against is spent (its last answer said so), the call waits for the
// quota's reset first rather than be refused.
func (r *Reaper) call(ctx context.Context, p provider.Provider, prio int, kind, what string, f func(context.Context) error) error {
	g := r.callGate()
	for {
		if err := g.acquire(ctx, prio); err != nil {
			return fmt.Errorf("%s: waiting for a call slot: %w", what, err)
		}
		// Checked with the slot in hand, right before sending: the answers
		// of the calls that held the slots meanwhile may have spent it.
		t, ok := p.(provider.Throttled)
		if !ok {
			break
		}
		wait := time.Until(t.ExhaustedUntil(kind))
		if wait <= 0 {
			break
		}
		g.cancel()
		if !sleep(ctx, wait) {
			return fmt.Errorf("%s: %w", what, &provider.RateLimitError{RetryAfter: wait, Limiter: "the provider's quota for " + kind + " calls, spent"})
		}
	}
	// A provider's own bound for this kind of call, when longer (a Docker
	// force-remove under load), spares it being cut and sent again.
	timeout := max(orDefault(r.CallTimeout, DefaultCallTimeout), provider.CallTimeout(p, kind))
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := f(cctx)
	if lowered := g.release(errors.Is(err, provider.ErrRateLimited)); lowered > 0 {
		r.log().Warn("provider calls throttled (429) in a round; lowering the concurrency, to spare the organization's shared quota", "concurrency", lowered)
	}
	if err == nil {
		return nil
	}
	if ctx.Err() == nil && cctx.Err() != nil && !errors.Is(err, provider.ErrUnavailable) {
		err = fmt.Errorf("%w: no answer within %s: %w", provider.ErrUnavailable, timeout, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// backoff is the wait before try attempt+1: base doubling up to max, the
// top Jitter fraction of it drawn at random; a rate limit's Retry-After is
// a floor (plus a little jitter, so a burst of 429s does not come back as
// one burst).
func (r *Reaper) backoff(attempt int, base, max time.Duration, err error) time.Duration {
	d := base
	for i := 0; i < attempt && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	jitter := orDefault(r.Jitter, DefaultJitter)
	if jitter > 0 {
		d -= time.Duration(rand.Float64() * min(jitter, 1) * float64(d))
	}
	var rl *provider.RateLimitError
	if errors.As(err, &rl) && rl.RetryAfter > d {
		d = rl.RetryAfter + time.Duration(rand.Float64()*float64(base))
	}
	return d
}

// sleep waits d or until ctx ends, and reports whether the wait completed.
// A wait that would outlast ctx's deadline ends at once: nothing useful can
// come after it.
func sleep(ctx context.Context, d time.Duration) bool {
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < d {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
