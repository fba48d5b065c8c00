package e2b_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/e2b/e2btest"
)

// A 429 of the rate limiter waits its Retry-After, the time to the next
// request allowed, not RateLimit-Reset, the time until the whole burst is
// back: with a burst of 3 at one request a minute, the 4th call waits about
// a minute, not three.
func TestRateLimitWaitsRetryAfterNotReset(t *testing.T) {
	e := newEnv(t, e2btest.WithRateLimit(e2btest.PatternSandbox, e2btest.RateLimit{Rate: 3, Burst: 3, Period: 3 * time.Minute}))
	sb := e.create("run-1", nil)
	for range 3 {
		if _, err := e.p.Get(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	err := e.p.Delete(ctx, sb.ID)
	var rl *provider.RateLimitError
	if !errors.As(err, &rl) {
		t.Fatalf("Delete with the quota spent: %v, want a rate limit", err)
	}
	if rl.RetryAfter <= 0 || rl.RetryAfter > time.Minute+time.Second {
		t.Errorf("RetryAfter %s, want the limiter's Retry-After (at most a minute), not the burst's reset (three)", rl.RetryAfter)
	}
	if f := e.fate(sb.ID); f.State != e2btest.StateRunning {
		t.Errorf("a refused delete: %s", f.State)
	}
}

// A timeout is sent in whole seconds rounded up: a sandbox never ends
// before the time asked, and a timeout under a second is one second, not
// zero (which the server takes as "end now").
func TestSetTimeoutRoundsUp(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	e := newEnv(t, e2btest.WithClock(func() time.Time { return now }))
	sb := e.create("run-1", nil)
	for _, c := range []struct{ asked, want time.Duration }{
		{500 * time.Millisecond, time.Second},
		{1500 * time.Millisecond, 2 * time.Second},
		{90 * time.Second, 90 * time.Second},
	} {
		if err := e.p.SetTimeout(ctx, sb.ID, c.asked); err != nil {
			t.Fatalf("SetTimeout(%s): %v", c.asked, err)
		}
		if got := e.fate(sb.ID).EndAt.Sub(now); got != c.want {
			t.Errorf("SetTimeout(%s): the simulator's end is %s from now, want %s", c.asked, got, c.want)
		}
	}
}
