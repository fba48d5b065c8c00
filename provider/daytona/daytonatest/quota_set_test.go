package daytonatest_test

import (
	"testing"
	"time"

	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// TestSetRateLimitOnARunningServer: a quota turned on while the server
// runs counts from empty (what came before it is not held against the
// organization), holds every key of the organization to one counter,
// blocks for a whole window past the limit, and turned off again lets
// everything through with no X-RateLimit headers.
func TestSetRateLimitOnARunningServer(t *testing.T) {
	clk := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := newServer(t, daytonatest.WithClock(clk.Now), daytonatest.WithCreateWait(0))
	s.AddKey("second-key", daytonatest.DefaultOrg)
	a, b := newClient(t, s, daytonatest.DefaultKey), newClient(t, s, "second-key")
	sb := seedIn(t, s, daytonatest.SeedSandbox{})
	read := func(c *client) (int, string, string) {
		_, resp, _ := c.api.SandboxAPI.GetSandbox(c.ctx, sb.ID).Execute()
		return status(resp), resp.Header.Get("X-RateLimit-Remaining-authenticated"), resp.Header.Get("Retry-After-authenticated")
	}
	for range 5 { // before the quota: not counted
		if code, rem, _ := read(a); code != 200 || rem != "" {
			t.Fatalf("before the quota: %d, remaining %q", code, rem)
		}
	}
	s.SetRateLimit(daytonatest.ThrottlerAuthenticated, 2, 10*time.Second)
	if code, rem, _ := read(a); code != 200 || rem != "1" {
		t.Fatalf("first read under the quota: %d, remaining %q; want 200, 1", code, rem)
	}
	clk.Add(time.Second)
	if code, rem, _ := read(b); code != 200 || rem != "0" {
		t.Fatalf("second read, another key of the organization: %d, remaining %q; want 200, 0", code, rem)
	}
	clk.Add(time.Second)
	if code, _, retry := read(a); code != 429 || retry != "10" {
		t.Fatalf("third read: %d, Retry-After-authenticated %q; want 429 blocked for the whole window (10)", code, retry)
	}
	// The window of the first hit ends at 10 s, the block at 12 s.
	clk.Add(9 * time.Second)
	if code, _, retry := read(b); code != 429 || retry != "1" {
		t.Fatalf("inside the block, after the window: %d, Retry-After-authenticated %q; want 429, 1", code, retry)
	}
	s.SetRateLimit(daytonatest.ThrottlerAuthenticated, 0, 0)
	if code, rem, _ := read(a); code != 200 || rem != "" {
		t.Fatalf("quota off: %d, remaining %q; want 200 with no header", code, rem)
	}
	s.SetRateLimit(daytonatest.ThrottlerAuthenticated, 1, time.Minute)
	if code, rem, _ := read(a); code != 200 || rem != "0" {
		t.Fatalf("quota on again: %d, remaining %q; want a fresh counter (200, 0)", code, rem)
	}
}
