package e2b

import (
	"net/http"
	"testing"
	"time"

	"github.com/tether-run/tether/provider"
)

// TestQuotaMarks: how long an answer holds every call of its route. A
// 429 holds for its Retry-After, not for RateLimit-Reset (the time to a
// full bucket). An allowed answer with RateLimit-Remaining: 0 holds for
// about one emission interval of the GCRA bucket, Reset/Limit (20 ms for
// a burst of 100 refilled in 2 s), not for the whole Reset: the next
// request fits long before the burst is back, and a tether that waits
// for the whole burst near its deadline gives its deletes up.
func TestQuotaMarks(t *testing.T) {
	for _, c := range []struct {
		name string
		code int
		h    map[string]string
		want time.Duration
	}{
		{"429", http.StatusTooManyRequests, map[string]string{"Retry-After": "1", "RateLimit-Remaining": "0", "RateLimit-Reset": "2", "RateLimit-Limit": "100"}, time.Second},
		{"429 without Retry-After", http.StatusTooManyRequests, map[string]string{"RateLimit-Remaining": "0", "RateLimit-Reset": "2"}, 2 * time.Second},
		{"allowed, bucket empty", http.StatusNoContent, map[string]string{"RateLimit-Remaining": "0", "RateLimit-Reset": "2", "RateLimit-Limit": "100"}, 20 * time.Millisecond},
		{"allowed, burst of 1", http.StatusOK, map[string]string{"RateLimit-Remaining": "0", "RateLimit-Reset": "60", "RateLimit-Limit": "1"}, time.Minute},
		{"allowed, some left", http.StatusOK, map[string]string{"RateLimit-Remaining": "3", "RateLimit-Reset": "2", "RateLimit-Limit": "100"}, 0},
	} {
		p := &Provider{exhausted: map[string]time.Time{}}
		h := http.Header{}
		for k, v := range c.h {
			h.Set(k, v)
		}
		now := time.Now()
		p.noteQuota("/sandboxes/abc", c.code, h, now)
		got := time.Duration(0)
		if until := p.ExhaustedUntil(provider.CallDelete); !until.IsZero() {
			got = until.Sub(now)
		}
		if got != c.want {
			t.Errorf("%s: route held %s, want %s", c.name, got, c.want)
		}
		if p.Quota(provider.CallRead) != p.Quota(provider.CallDelete) || p.Quota(provider.CallSetter) == p.Quota(provider.CallDelete) {
			t.Errorf("quotas: read %q, delete %q, setter %q; want the read and the kill on one bucket, the timeout on another",
				p.Quota(provider.CallRead), p.Quota(provider.CallDelete), p.Quota(provider.CallSetter))
		}
	}
}
