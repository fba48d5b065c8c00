package daytonatest

import (
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Daytona's throttlers (apps/api/src/app.module.ts:153-172 at v0.190.0).
// Every authenticated route counts against `authenticated`, except the ones
// that skip it and opt into a sandbox throttler instead
// (common/guards/authenticated-rate-limit.guard.ts:76-95,
// common/decorators/throttler-scope.decorator.ts:10-27).
const (
	ThrottlerAuthenticated    = "authenticated"
	ThrottlerSandboxCreate    = "sandbox-create"
	ThrottlerSandboxLifecycle = "sandbox-lifecycle"
	ThrottlerFailedAuth       = "failed-auth"
)

// throttlerOf is the throttler a route counts against: POST /sandbox skips
// `authenticated` for `sandbox-create` (sandbox.controller.ts:232-233);
// DELETE, start and stop skip it for `sandbox-lifecycle`
// (sandbox.controller.ts:399-400, 485-486, 527-528). Reads, the list and
// the setters (autostop, autoarchive, autodelete, labels) count against
// `authenticated`.
func throttlerOf(route string) string {
	switch route {
	case RouteCreate, RouteFork:
		// A fork is a create (sandbox.controller.ts:783-784).
		return ThrottlerSandboxCreate
	case RouteDelete, RouteStart, RouteStop, RouteArchive:
		// sandbox.controller.ts:1134-1135 for archive.
		return ThrottlerSandboxLifecycle
	}
	return ThrottlerAuthenticated
}

// Quota is one throttler's limit: Limit requests per Window, per organization.
type Quota struct {
	Limit  int
	Window time.Duration
}

// WithRateLimit makes the server enforce a quota on one throttler
// (Throttler* names), per organization, as the real server does with
// @nestjs/throttler over Redis: the counter is shared by every request of
// the organization, whatever its route (authenticated-rate-limit.guard.ts:
// 31-37, 49-53), and once it passes Limit within a Window every request of
// that throttler answers 429 until the window has passed. Without it a
// server enforces no quota and sends no X-RateLimit headers.
func WithRateLimit(throttler string, limit int, window time.Duration) Option {
	return func(s *Server) { s.quotas[throttler] = Quota{Limit: limit, Window: window} }
}

// SetRateLimit is WithRateLimit on a running server: from the next request
// on, the throttler enforces limit per window for every organization
// (limit <= 0 removes the quota). The counters start empty, as after a
// deploy that turns the throttler on, so a benchmark can create its
// sandboxes unthrottled and then drain them against the quota.
func (s *Server) SetRateLimit(throttler string, limit int, window time.Duration) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	for k := range s.windows {
		if strings.HasPrefix(k, throttler+"\x00") {
			delete(s.windows, k)
		}
	}
	if limit <= 0 || window <= 0 {
		delete(s.quotas, throttler)
		return
	}
	s.quotas[throttler] = Quota{Limit: limit, Window: window}
}

// WithFailedAuthLimit blocks a client address for window once it has made
// limit requests that failed authentication within window: the request
// that reaches the limit and every request meanwhile answer 429 with a
// plain Retry-After (auth/failed-auth-tracker.service.ts:63-88,
// common/middleware/failed-auth-rate-limit.middleware.ts:52-70). It is the
// only 429 that carries a plain Retry-After.
func WithFailedAuthLimit(limit int, window time.Duration) Option {
	return func(s *Server) { s.failedAuth = Quota{Limit: limit, Window: window} }
}

// ThrottleStats is what the server's throttling did, for benchmarks and tests.
type ThrottleStats struct {
	// Refused is how many requests were answered 429, by throttler.
	Refused map[string]int
	// InWindow is how many requests arrived, by throttler, while their
	// organization was inside a throttle window: a window a 429 announced
	// with its Retry-After (quota or seeded fault), not yet over. A client
	// that honours the headers sends none there but the ones already in
	// flight.
	InWindow map[string]int
}

// Throttle returns the throttling counters.
func (s *Server) Throttle() ThrottleStats {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	out := ThrottleStats{Refused: map[string]int{}, InWindow: map[string]int{}}
	for k, v := range s.refused {
		out.Refused[k] = v
	}
	for k, v := range s.inWindow {
		out.InWindow[k] = v
	}
	return out
}

// window is one organization's counter for one throttler, as the Redis
// storage of @nestjs/throttler keeps it: hits in the current window, when
// the window ends, and until when the organization is blocked.
type window struct {
	hits         int
	expires      time.Time
	blockedUntil time.Time
}

// throttleKey names an organization's (or a client address's) counter.
func throttleKey(who, throttler string) string { return throttler + "\x00" + who }

// announced records that a 429 told who to wait until `until` on throttler,
// and counts a request that arrives before that.
func (s *Server) noteArrivalLocked(who, throttler string, now time.Time) {
	if until, ok := s.announced[throttleKey(who, throttler)]; ok && now.Before(until) {
		s.inWindow[throttler]++
	}
}

func (s *Server) announceLocked(who, throttler string, until time.Time) {
	k := throttleKey(who, throttler)
	if until.After(s.announced[k]) {
		s.announced[k] = until
	}
	s.refused[throttler]++
}

// countLocked counts one request against a quota and says whether it is
// refused, with the seconds to announce: Retry-After-<throttler> when
// refused (the time left of the block), else X-RateLimit-Reset-<throttler>
// (the time left of the window). It follows @nestjs/throttler's guard
// (throttler.guard.ts handleRequest, v6: a request past the limit blocks the
// tracker for the block duration, which Daytona leaves at the window length).
func (s *Server) countLocked(who, throttler string, q Quota, now time.Time) (refused bool, remaining int, seconds int) {
	w := s.hitLocked(throttleKey(who, throttler), q, now)
	if now.Before(w.blockedUntil) {
		return true, 0, ceilSeconds(w.blockedUntil.Sub(now))
	}
	if w.hits > q.Limit {
		w.blockedUntil = now.Add(q.Window)
		return true, 0, ceilSeconds(q.Window)
	}
	return false, max(0, q.Limit-w.hits), ceilSeconds(w.expires.Sub(now))
}

// hitLocked counts one hit in the window of tracker key k, which starts
// over, q.Window long, when the last one has expired.
func (s *Server) hitLocked(k string, q Quota, now time.Time) *window {
	w := s.windows[k]
	if w == nil {
		w = &window{}
		s.windows[k] = w
	}
	if !now.Before(w.expires) {
		w.hits, w.expires = 0, now.Add(q.Window)
	}
	w.hits++
	return w
}

func ceilSeconds(d time.Duration) int { return int(math.Ceil(d.Seconds())) }

// setRateLimitHeaders writes X-RateLimit-{Limit,Remaining,Reset}-<throttler>
// (throttler.guard.ts handleRequest; common/utils/rate-limit-headers.util.ts:24-33).
func setRateLimitHeaders(h http.Header, throttler string, limit, remaining, reset int) {
	h.Set("X-RateLimit-Limit-"+throttler, strconv.Itoa(limit))
	h.Set("X-RateLimit-Remaining-"+throttler, strconv.Itoa(remaining))
	h.Set("X-RateLimit-Reset-"+throttler, strconv.Itoa(reset))
}

// clientAddr is the address the failed-auth throttler tracks (req.ip).
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// failedAuthBlockedLocked reports whether addr is blocked for failed
// authentications, with the seconds left (failed-auth-rate-limit.middleware.ts:52-70).
func (s *Server) failedAuthBlockedLocked(addr string, now time.Time) (bool, int) {
	w := s.windows[throttleKey(addr, ThrottlerFailedAuth)]
	if w == nil || !now.Before(w.blockedUntil) {
		return false, 0
	}
	return true, max(1, ceilSeconds(w.blockedUntil.Sub(now)))
}

// failedAuthLocked counts a failed authentication of addr and reports
// whether it reached the limit, with the seconds of the block
// (failed-auth-tracker.service.ts:63-88).
func (s *Server) failedAuthLocked(addr string, now time.Time) (bool, int) {
	q := s.failedAuth
	if q.Limit <= 0 || q.Window <= 0 {
		return false, 0
	}
	w := s.hitLocked(throttleKey(addr, ThrottlerFailedAuth), q, now)
	if w.hits >= q.Limit {
		w.blockedUntil = now.Add(q.Window)
		return true, ceilSeconds(q.Window)
	}
	return false, 0
}
