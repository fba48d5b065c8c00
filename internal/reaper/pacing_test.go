package reaper

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/provider"
)

// TestResumeWait: a call that waits for a spent quota comes back after it
// is back, at a random point of a short spread (at most ResumeSpread, a
// quarter of the wait, half of what the deadline leaves after it), so that
// the calls of many tethers do not all come back at once; and not at all
// when the quota is back only after the deadline.
func TestResumeWait(t *testing.T) {
	t.Parallel()
	r := &Reaper{ResumeSpread: 200 * time.Millisecond}
	draws := func(ctx context.Context, in time.Duration) (lo, hi time.Duration) {
		t.Helper()
		lo = time.Hour
		for range 200 {
			until := time.Now().Add(in)
			wait, ok := r.resumeWait(ctx, until)
			if !ok {
				t.Fatalf("a quota back in %s: no wait before the deadline", in)
			}
			// wait is from the call's now, a little after until was taken.
			extra := wait - time.Until(until)
			lo, hi = min(lo, extra), max(hi, extra)
		}
		return lo, hi
	}
	long, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	const slack = 5 * time.Millisecond // the clock moving during a draw
	for _, c := range []struct {
		name   string
		ctx    context.Context
		in     time.Duration
		spread time.Duration
	}{
		{"a long wait: ResumeSpread", long, 2 * time.Second, 200 * time.Millisecond},
		{"a short wait: a quarter of it", long, 400 * time.Millisecond, 100 * time.Millisecond},
		{"no deadline", context.Background(), 2 * time.Second, 200 * time.Millisecond},
	} {
		lo, hi := draws(c.ctx, c.in)
		if lo < -slack || hi > c.spread+slack {
			t.Errorf("%s: extra waits in [%s, %s], want within [0, %s]", c.name, lo, hi, c.spread)
		}
		if hi-lo < c.spread/2 {
			t.Errorf("%s: extra waits in [%s, %s]: not spread over %s (calls come back together)", c.name, lo, hi, c.spread)
		}
	}

	// Near the deadline the spread shrinks to half of what is left after
	// the quota is back; past it, nothing is waited.
	near, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	deadline, _ := near.Deadline()
	for range 200 {
		until := deadline.Add(-100 * time.Millisecond)
		wait, ok := r.resumeWait(near, until)
		if !ok || time.Now().Add(wait).After(deadline.Add(-50*time.Millisecond+slack)) {
			t.Fatalf("quota back 100 ms before the deadline: wait %s (ok %v) ends %s before it, want at least 50 ms", wait, ok, time.Until(deadline)-wait)
		}
	}
	if _, ok := r.resumeWait(near, deadline.Add(time.Millisecond)); ok {
		t.Error("a quota back after the deadline: waited for")
	}
}

// throttledFake is a provider whose quota marks the test sets, per kind;
// every kind counts against one quota, as E2B's read and kill do.
type throttledFake struct {
	provider.Provider
	mu    sync.Mutex
	until map[string]time.Time
	sent  map[string]time.Time
}

func (f *throttledFake) Name() string { return "fake" }

func (f *throttledFake) ExhaustedUntil(kind string) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.until[kind]
}

func (f *throttledFake) Quota(string) string { return "one" }

func (f *throttledFake) send(kind string) func(context.Context) error {
	return func(context.Context) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.sent[kind] = time.Now()
		return nil
	}
}

// TestConfirmWaitsForWhatIsOwedToItsQuota: a confirming read waits while
// a delete of this reaper waits for the quota they share, even when the
// read's own wait ends first: what stops the billing spends the quota
// first (on E2B the kill and the read share one bucket).
func TestConfirmWaitsForWhatIsOwedToItsQuota(t *testing.T) {
	t.Parallel()
	now := time.Now()
	f := &throttledFake{
		until: map[string]time.Time{provider.CallRead: now.Add(50 * time.Millisecond), provider.CallDelete: now.Add(400 * time.Millisecond)},
		sent:  map[string]time.Time{},
	}
	r := &Reaper{ResumeSpread: time.Nanosecond}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := r.call(ctx, f, prioDestroy, provider.CallDelete, "delete", f.send(provider.CallDelete)); err != nil {
			t.Error(err)
		}
	})
	testutil.Eventually(t, "the delete to wait for the quota", func() (bool, string) {
		o := r.owed()
		o.mu.Lock()
		defer o.mu.Unlock()
		return o.n["fake one"] == 1, "not owed yet"
	})
	wg.Go(func() {
		if err := r.call(ctx, f, prioConfirm, provider.CallRead, "confirm", f.send(provider.CallRead)); err != nil {
			t.Error(err)
		}
	})
	wg.Wait()
	if read, del := f.sent[provider.CallRead], f.sent[provider.CallDelete]; read.Before(del) {
		t.Errorf("the confirming read went %s before the delete owed to its quota", del.Sub(read))
	}
	if n := len(r.owed().n); n != 0 {
		t.Errorf("%d quotas still owed after the calls", n)
	}
}

// TestConfirmYieldsASpentQuotaToDeletes: in a drain that saw a quota
// spent which deletes count against too, a confirming read waits
// ConfirmYield after the last time it was seen spent (the other tethers'
// deletes, which it cannot see, come back first), and at the latest until
// the hand-off point; not for a quota deletes do not share (Daytona's
// reads), nor for one never seen spent, nor outside a drain.
func TestConfirmYieldsASpentQuotaToDeletes(t *testing.T) {
	t.Parallel()
	const yield, reserve = 2 * time.Second, time.Second
	long, cancel := context.WithTimeout(withDrainState(context.Background()), time.Hour)
	defer cancel()
	ds := long.Value(drainStateKey{}).(*drainState)
	if _, wait := ds.confirmAfter(long, "kill", "kill", yield, reserve); wait {
		t.Error("a confirmation waits for a quota never seen spent")
	}
	ds.sawSpent("kill")
	seen := time.Now()
	at, wait := ds.confirmAfter(long, "kill", "kill", yield, reserve)
	if !wait || at.Before(seen.Add(yield-10*time.Millisecond)) || at.After(seen.Add(yield+10*time.Millisecond)) {
		t.Errorf("confirm after %s from the spent quota (wait %v), want %s", at.Sub(seen), wait, yield)
	}
	if _, wait := ds.confirmAfter(long, "authenticated", "sandbox-lifecycle", yield, reserve); wait {
		t.Error("a confirmation waits for a quota deletes do not share")
	}
	short, cancel := context.WithTimeout(long, 1500*time.Millisecond)
	defer cancel()
	deadline, _ := short.Deadline()
	if at, wait := ds.confirmAfter(short, "kill", "kill", yield, reserve); !wait || !at.Equal(deadline.Add(-reserve)) {
		t.Errorf("near the deadline: confirm %s before it (wait %v), want at the hand-off point, %s before", deadline.Sub(at), wait, reserve)
	}
	var none *drainState
	if _, wait := none.confirmAfter(long, "kill", "kill", yield, reserve); wait {
		t.Error("a confirmation outside a drain waits")
	}
}
