package daytona

import (
	"net/http"
	"testing"
	"time"

	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/internal/apicall"
)

// TestRateLimitHeaderParsing reads Daytona's 429 headers: the throttler's own
// Retry-After wins, a plain one is the failed-auth throttler's, and a spent
// quota's reset stands in when there is neither.
func TestRateLimitHeaderParsing(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name    string
		h       map[string]string
		want    time.Duration
		limiter string
	}{
		{"lifecycle", map[string]string{"Retry-After-sandbox-lifecycle": "7"}, 7 * time.Second, "sandbox-lifecycle"},
		{"the longest of two", map[string]string{"Retry-After-authenticated": "2", "Retry-After-sandbox-create": "30"}, 30 * time.Second, "sandbox-create"},
		{"plain, failed auth", map[string]string{"Retry-After": "60", "X-RateLimit-Remaining-failed-auth": "0"}, time.Minute, "failed-auth"},
		{"plain, unnamed", map[string]string{"Retry-After": "3"}, 3 * time.Second, ""},
		{"spent quota only", map[string]string{"X-RateLimit-Remaining-sandbox-lifecycle": "0", "X-RateLimit-Reset-sandbox-lifecycle": "12"}, 12 * time.Second, "sandbox-lifecycle"},
		{"quota left", map[string]string{"X-RateLimit-Remaining-authenticated": "5", "X-RateLimit-Reset-authenticated": "12"}, 0, ""},
		{"garbage", map[string]string{"Retry-After-x": "soon", "Retry-After": "-4"}, 0, ""},
		{"huge", map[string]string{"Retry-After-x": "1e308"}, apicall.MaxRetryAfter, "x"},
		{"none", nil, 0, ""},
	} {
		h := http.Header{}
		for k, v := range tt.h {
			h.Set(k, v)
		}
		rl := rateLimit(h, now)
		if rl.RetryAfter != tt.want || rl.Limiter != tt.limiter {
			t.Errorf("%s: %+v, want %s by %q", tt.name, rl, tt.want, tt.limiter)
		}
	}
}

// FuzzRateLimitHeaders: any header values a server sends are read without
// a panic, into a wait that is never negative.
func FuzzRateLimitHeaders(f *testing.F) {
	f.Add("Retry-After-sandbox-lifecycle", "1", "X-RateLimit-Remaining-authenticated", "0", "12")
	f.Add("Retry-After", "Wed, 21 Oct 2015 07:28:00 GMT", "X-RateLimit-Reset-x", "1e308", "NaN")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, reset string) {
		h := http.Header{}
		h.Add(k1, v1)
		h.Add(k2, v2)
		h.Add("X-RateLimit-Reset-"+k2, reset)
		now := time.Now()
		if rl := rateLimit(h, now); rl.RetryAfter < 0 || rl.RetryAfter > apicall.MaxRetryAfter {
			t.Fatalf("negative wait %s from %v", rl.RetryAfter, h)
		}
		p := &Provider{exhausted: map[string]time.Time{}, block: map[string]time.Time{}}
		p.noteQuota(&http.Response{StatusCode: http.StatusTooManyRequests, Header: h}, now)
		p.noteQuota(&http.Response{StatusCode: http.StatusOK, Header: h}, now)
		for name, until := range p.block {
			if until.Before(now) {
				t.Fatalf("quota %q refused until %s, before now", name, until)
			}
		}
		for name, until := range p.exhausted {
			if until.Before(now) {
				t.Fatalf("quota %q spent until %s, before now", name, until)
			}
		}
	})
}

// TestA429HoldsItsThrottler: a 429's Retry-After-<throttler> marks that
// throttler refused until then for every call that counts against it
// (a delete's 429 holds the stops too, not the reads), not only for the
// call refused; and within one block the earliest end a 429 gave holds,
// each 429 bounding the same end rounded up from when it was refused.
func TestA429HoldsItsThrottler(t *testing.T) {
	p := &Provider{exhausted: map[string]time.Time{}, block: map[string]time.Time{}}
	refused := func(now time.Time, secs string) {
		h := http.Header{}
		h.Set("Retry-After-sandbox-lifecycle", secs)
		p.noteQuota(&http.Response{StatusCode: http.StatusTooManyRequests, Header: h}, now)
	}
	now := time.Now()
	refused(now, "7")
	for _, kind := range []string{provider.CallDelete, provider.CallStop} {
		if got := p.ExhaustedUntil(kind); !got.Equal(now.Add(7 * time.Second)) {
			t.Errorf("%s: held until %s from now, want 7 s", kind, got.Sub(now))
		}
	}
	if !p.ExhaustedUntil(provider.CallRead).IsZero() {
		t.Error("a lifecycle 429 holds the reads, which count against authenticated")
	}
	refused(now.Add(500*time.Millisecond), "7") // the same block: ends by 7.5 s, and by 7 s
	if got := p.ExhaustedUntil(provider.CallDelete); !got.Equal(now.Add(7 * time.Second)) {
		t.Errorf("after a second 429 of the block: held until %s from now, want the earlier bound, 7 s", got.Sub(now))
	}
	refused(now.Add(800*time.Millisecond), "6") // a tighter bound: 6.8 s
	if got := p.ExhaustedUntil(provider.CallDelete); !got.Equal(now.Add(6800 * time.Millisecond)) {
		t.Errorf("after a tighter 429: held until %s from now, want 6.8 s", got.Sub(now))
	}
	// An allowed answer's spent window holds on its own.
	h := http.Header{}
	h.Set("X-RateLimit-Remaining-authenticated", "0")
	h.Set("X-RateLimit-Reset-authenticated", "3")
	p.noteQuota(&http.Response{StatusCode: http.StatusOK, Header: h}, now)
	if got := p.ExhaustedUntil(provider.CallRead); !got.Equal(now.Add(3 * time.Second)) {
		t.Errorf("authenticated spent until %s from now, want 3 s", got.Sub(now))
	}
}
