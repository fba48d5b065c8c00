package reaper

// The provider calls: every call the reaper makes goes through call, under
// the gate's bound and priorities, CallTimeout and the pacing of its quota
// (a spent quota's wait, jittered; confirmations after what is owed);
// backoff and sleep are the waits between tries.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
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
// it is retried.
//
// The quota the call counts against paces it (a provider.Throttled knows
// which, and whether it is spent):
//   - When the provider knows that quota spent (its last answers said so:
//     a 429's Retry-After, or a remaining of 0), the call waits until the
//     quota is back rather than be refused, whatever kind of call was
//     refused: every call of this reaper to that quota waits.
//   - It comes back at a random point of a spread after that (resumeWait),
//     so that the calls of many tethers that saw one quota spent do not
//     all come back at its reset and spend it at once, most of them to be
//     refused again. The spread ends well before ctx's deadline.
//   - A wait that would end past ctx's deadline is not waited: the call is
//     refused at once (a RateLimitError), so that the drain can hand the
//     sandbox off while it has time.
//   - A confirming read (prioConfirm) waits while this reaper owes a call
//     of a higher priority to the same quota (a delete refused or held;
//     on E2B the read and the kill share a bucket): what stops the billing
//     gets the quota first. In a drain, a confirming read to a quota that
//     deletes share also yields it for ConfirmYield after it was last seen
//     spent, for the other tethers' deletes (drainState.confirmAfter).
func (r *Reaper) call(ctx context.Context, p provider.Provider, prio int, kind, what string, f func(context.Context) error) error {
	g := r.callGate()
	t, throttled := p.(provider.Throttled)
	quota := quotaOf(p, kind)
	ds, _ := ctx.Value(drainStateKey{}).(*drainState)
	// A call held for its quota is owed to it until it has been sent and
	// answered, not only until its wait ends: a confirmation woken by the
	// end of the wait would otherwise race it to the quota.
	var paid func()
	defer func() {
		if paid != nil {
			paid()
		}
	}()
	for {
		if prio == prioConfirm && quota != "" {
			if err := r.owed().wait(ctx, quota); err != nil {
				return fmt.Errorf("%s: waiting for the deletes that share its quota: %w", what, err)
			}
			if d, ok := ds.confirmAfter(ctx, quota, quotaOf(p, provider.CallDelete), orDefault(r.ConfirmYield, DefaultConfirmYield), orDefault(r.HandOffReserve, DefaultHandOffReserve)); ok {
				if !sleep(ctx, time.Until(d)) {
					return fmt.Errorf("%s: yielding its quota, which deletes share and which was seen spent, to the deletes: %w", what, context.DeadlineExceeded)
				}
				continue
			}
		}
		if err := g.acquire(ctx, prio); err != nil {
			return fmt.Errorf("%s: waiting for a call slot: %w", what, err)
		}
		// Checked with the slot in hand, right before sending: the answers
		// of the calls that held the slots meanwhile may have spent it.
		if !throttled {
			break
		}
		until := t.ExhaustedUntil(kind)
		if !time.Now().Before(until) {
			break
		}
		ds.sawSpent(quota)
		g.cancel()
		wait, ok := r.resumeWait(ctx, until)
		if !ok {
			return fmt.Errorf("%s: %w", what, &provider.RateLimitError{RetryAfter: time.Until(until), Limiter: "the provider's quota for " + kind + " calls, spent past the deadline"})
		}
		if prio > prioConfirm && paid == nil {
			paid = r.owed().add(quota)
		}
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
	if errors.Is(err, provider.ErrRateLimited) {
		ds.sawSpent(quota)
	}
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

// quotaOf names the quota calls of kind to p count against, for owed; ""
// when p does not say.
func quotaOf(p provider.Provider, kind string) string {
	if q, ok := p.(provider.Quotas); ok {
		return p.Name() + " " + q.Quota(kind)
	}
	return ""
}

// resumeWait is how long a call waits for a quota spent until until: to
// until, plus a random share of a spread (ResumeSpread, at most a quarter
// of the wait, at most half of what ctx's deadline leaves after until).
// The spread is short: a fixed window (Daytona's) is best used by calls
// that come back right at its start, so that its overflow, which blocks
// the organization for a whole window from that moment, comes early too;
// a refilling bucket (E2B's) is used as well by calls spread over it. ok is
// false when until is past the deadline: the call cannot be sent in time.
func (r *Reaper) resumeWait(ctx context.Context, until time.Time) (wait time.Duration, ok bool) {
	now := time.Now()
	wait = until.Sub(now)
	spread := min(orDefault(r.ResumeSpread, DefaultResumeSpread), wait/4)
	if deadline, has := ctx.Deadline(); has {
		left := deadline.Sub(until)
		if left <= 0 {
			return wait, false
		}
		spread = min(spread, left/2)
	}
	if spread > 0 {
		wait += time.Duration(rand.Int64N(int64(spread) + 1))
	}
	return wait, true
}

// drainState is what the calls of one drain learn together: when each
// quota was last seen spent (a call held for it, or refused by it).
type drainState struct {
	mu    sync.Mutex
	spent map[string]time.Time
}

type drainStateKey struct{}

func withDrainState(ctx context.Context) context.Context {
	return context.WithValue(ctx, drainStateKey{}, &drainState{spent: map[string]time.Time{}})
}

func (ds *drainState) sawSpent(quota string) {
	if ds == nil || quota == "" {
		return
	}
	ds.mu.Lock()
	defer ds.mu.Unlock()
	ds.spent[quota] = time.Now()
}

// confirmAfter is when a confirming read to quota may be sent in a drain
// that saw quota spent, when deletes count against it too (deleteQuota;
// E2B's read and kill share a bucket): yield after the last time it was
// seen spent, and at the latest at the hand-off point, reserve before the
// deadline. The fleet's tethers cannot tell each other which of them still
// has deletes waiting, and a tether that has none sends nothing that
// would tell it the quota is still spent; a confirmation stops no billing
// (E2B's kill is done when it is answered). So a tether leaves a quota it
// saw spent to the deletes for a while before it confirms; what it cannot
// confirm by its deadline stays releasing in the journal, for the replay.
func (ds *drainState) confirmAfter(ctx context.Context, quota, deleteQuota string, yield, reserve time.Duration) (time.Time, bool) {
	if ds == nil || quota != deleteQuota {
		return time.Time{}, false
	}
	ds.mu.Lock()
	last, seen := ds.spent[quota]
	ds.mu.Unlock()
	if !seen {
		return time.Time{}, false
	}
	at := last.Add(yield)
	if deadline, ok := ctx.Deadline(); ok && deadline.Add(-reserve).Before(at) {
		at = deadline.Add(-reserve)
	}
	return at, time.Now().Before(at)
}

// owed is, per quota, how many calls of a higher priority than a
// confirmation this reaper has waiting for it (held by a spent quota, or
// refused by it and not yet sent again): confirming reads to that quota
// wait until there are none.
type owed struct {
	mu   sync.Mutex
	n    map[string]int
	paid chan struct{} // closed, and replaced, when a count falls to 0
}

func (r *Reaper) owed() *owed {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.debts == nil {
		r.debts = &owed{n: map[string]int{}, paid: make(chan struct{})}
	}
	return r.debts
}

// add counts one call owed to quota, until the returned func is called
// (once; later calls do nothing).
func (o *owed) add(quota string) (paid func()) {
	if quota == "" {
		return func() {}
	}
	o.mu.Lock()
	o.n[quota]++
	o.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			o.mu.Lock()
			defer o.mu.Unlock()
			if o.n[quota]--; o.n[quota] <= 0 {
				delete(o.n, quota)
				close(o.paid)
				o.paid = make(chan struct{})
			}
		})
	}
}

// wait returns once nothing is owed to quota, or with ctx's error.
func (o *owed) wait(ctx context.Context, quota string) error {
	for {
		o.mu.Lock()
		n, paid := o.n[quota], o.paid
		o.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-paid:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
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
