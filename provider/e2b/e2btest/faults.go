package e2btest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Route names, as counted by Calls and targeted by FailNext and
// Faults.Routes.
const (
	RouteCreate  = "create"  // POST /sandboxes
	RouteList    = "list"    // GET /v2/sandboxes
	RouteGet     = "get"     // GET /sandboxes/{sandboxID}
	RouteKill    = "kill"    // DELETE /sandboxes/{sandboxID}
	RoutePause   = "pause"   // POST /sandboxes/{sandboxID}/pause
	RouteResume  = "resume"  // POST /sandboxes/{sandboxID}/resume
	RouteConnect = "connect" // POST /sandboxes/{sandboxID}/connect
	RouteTimeout = "timeout" // POST /sandboxes/{sandboxID}/timeout
	RouteRefresh = "refresh" // POST /sandboxes/{sandboxID}/refreshes
	RouteFork    = "fork"    // POST /sandboxes/{sandboxID}/fork
	RouteUnknown = "unknown"
)

// Route patterns, as the real rate limiter keys its limits: the gin route
// (c.FullPath()), without the method, so GET and DELETE of one sandbox
// share a limit (middleware/ratelimit/ratelimit.go:87, 107).
const (
	PatternSandboxes = "/sandboxes"
	PatternList      = "/v2/sandboxes"
	PatternSandbox   = "/sandboxes/:sandboxID"
	PatternPause     = "/sandboxes/:sandboxID/pause"
	PatternResume    = "/sandboxes/:sandboxID/resume"
	PatternConnect   = "/sandboxes/:sandboxID/connect"
	PatternTimeout   = "/sandboxes/:sandboxID/timeout"
	PatternRefresh   = "/sandboxes/:sandboxID/refreshes"
	PatternFork      = "/sandboxes/:sandboxID/fork"
)

var patternOf = map[string]string{
	RouteCreate: PatternSandboxes, RouteList: PatternList, RouteGet: PatternSandbox, RouteKill: PatternSandbox,
	RoutePause: PatternPause, RouteResume: PatternResume, RouteConnect: PatternConnect,
	RouteTimeout: PatternTimeout, RouteRefresh: PatternRefresh, RouteFork: PatternFork,
}

// DefaultRetryAfter is the Retry-After a faulted 429 carries when
// Faults.RetryAfter is zero.
const DefaultRetryAfter = time.Second

// Faults are random failures drawn from a generator seeded with Seed, so a
// sequential test sees the same faults on every run. Rates are shares of
// calls between 0 and 1. The zero value is a healthy server.
type Faults struct {
	Seed int64
	// Latency is added to every call in scope before it is answered.
	Latency time.Duration
	// Rate5xx of calls in scope answer 500 without doing anything.
	Rate5xx float64
	// Rate429 of calls in scope answer 429 "Rate limit exceeded" with
	// Retry-After and RateLimit-* headers, as the rate limiter does
	// (middleware/ratelimit/ratelimit.go:126-149), without doing anything.
	Rate429 float64
	// RetryAfter is the hint of those 429s (DefaultRetryAfter if zero), in
	// whole seconds, at least 1 (ratelimit.go:138).
	RetryAfter time.Duration
	// RateCreateLost of creates make the sandbox and then lose the answer
	// (the connection is closed), so the caller never learns its id.
	RateCreateLost float64
	// RateForkLost of forks start their sandboxes and then lose the
	// answer (the connection is closed), so the caller never learns their
	// ids.
	RateForkLost float64
	// RateKillFail of kills fail on the node: the answer is 500 "Error
	// killing sandbox", but the sandbox has already left the store and
	// answers 404 from then on (orchestrator/delete_instance.go:104-120);
	// the node's next reconcile kills it as an orphan (sandbox/store.go:
	// 139-153), which the simulator records at once.
	RateKillFail float64
	// Routes limits the faults to these routes (Route*); empty: all.
	Routes []string
}

// Scripted is one answer FailNext queues for a route.
type Scripted struct {
	Status  int
	Message string // empty: a message like the real server's for the status
	// RetryAfter goes with a 429 (DefaultRetryAfter if zero).
	RetryAfter time.Duration
}

// SetFaults replaces the faults and reseeds their generator.
func (s *Server) SetFaults(f Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setFaultsLocked(f)
}

func (s *Server) setFaultsLocked(f Faults) {
	s.faults = f
	s.faults.Routes = slices.Clone(f.Routes)
	s.rng = rand.New(rand.NewPCG(uint64(f.Seed), 0xe2b))
}

// FailNext makes the next n calls of route answer status without doing
// anything (after authentication and rate limits).
func (s *Server) FailNext(route string, status, n int) {
	s.Inject(route, n, Scripted{Status: status})
}

// Inject queues n scripted answers for route.
func (s *Server) Inject(route string, n int, f Scripted) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.scripted[route] = append(s.scripted[route], f)
	}
}

// decision is what the faults make of one call.
type decision struct {
	latency    time.Duration
	status     int
	message    string
	retryAfter time.Duration
	lost       bool // create or fork: lose the answer
	killFail   bool
}

func (s *Server) decideLocked(route string) decision {
	var d decision
	f := s.faults
	inScope := len(f.Routes) == 0 || slices.Contains(f.Routes, route)
	if inScope {
		d.latency = f.Latency
	}
	if q := s.scripted[route]; len(q) > 0 {
		sc := q[0]
		s.scripted[route] = q[1:]
		d.status, d.message, d.retryAfter = sc.Status, sc.Message, sc.RetryAfter
		return d
	}
	if !inScope {
		return d
	}
	switch {
	case f.Rate5xx > 0 && s.rng.Float64() < f.Rate5xx:
		d.status = http.StatusInternalServerError
	case f.Rate429 > 0 && s.rng.Float64() < f.Rate429:
		d.status = http.StatusTooManyRequests
		d.retryAfter = f.RetryAfter
	case route == RouteCreate && f.RateCreateLost > 0 && s.rng.Float64() < f.RateCreateLost:
		d.lost = true
	case route == RouteFork && f.RateForkLost > 0 && s.rng.Float64() < f.RateForkLost:
		d.lost = true
	case route == RouteKill && f.RateKillFail > 0 && s.rng.Float64() < f.RateKillFail:
		d.killFail = true
	}
	return d
}

// RateLimit is a per-team limit of one route pattern (Pattern*), as the
// real limiter reads it from its feature flag: rate requests per period,
// with a burst (middleware/ratelimit/ratelimit.go:34-73).
type RateLimit struct {
	Rate, Burst int
	Period      time.Duration // zero: one second
}

// SetRateLimit limits route pattern for every team; a zero RateLimit
// removes the limit. A route without a limit is not limited and its
// answers carry no RateLimit-* header (ratelimit.go:89-96).
func (s *Server) SetRateLimit(pattern string, l RateLimit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.Rate <= 0 {
		delete(s.limits, pattern)
		return
	}
	s.limits[pattern] = l
}

// bucket is one team's GCRA state for one route, the algorithm of
// go-redis/redis_rate, which the real limiter uses (ratelimit.go:108).
type bucket struct{ tat time.Time }

type allowance struct {
	limited                bool
	remaining              int
	resetAfter, retryAfter time.Duration
}

// allowLocked spends one request of the team's quota for pattern.
func (s *Server) allowLocked(team, pattern string, now time.Time) (allowance, RateLimit, bool) {
	l, ok := s.limits[pattern]
	if !ok {
		return allowance{}, l, false
	}
	period := l.Period
	if period <= 0 {
		period = time.Second
	}
	burst := max(l.Burst, 1)
	key := team + " " + pattern
	b := s.buckets[key]
	if b == nil {
		b = &bucket{}
		s.buckets[key] = b
	}
	interval := period / time.Duration(l.Rate)
	tat := b.tat
	if tat.Before(now) {
		tat = now
	}
	newTat := tat.Add(interval)
	allowAt := newTat.Add(-interval * time.Duration(burst))
	diff := now.Sub(allowAt)
	if diff < 0 {
		return allowance{limited: true, retryAfter: -diff, resetAfter: tat.Sub(now)}, l, true
	}
	b.tat = newTat
	return allowance{remaining: int(diff / interval), resetAfter: newTat.Sub(now)}, l, true
}

// setRateLimitHeaders writes the headers of every answer of a limited
// route (ratelimit.go:126-129).
func setRateLimitHeaders(h http.Header, l RateLimit, a allowance) {
	h.Set("RateLimit-Limit", strconv.Itoa(max(l.Burst, 1)))
	h.Set("RateLimit-Remaining", strconv.Itoa(a.remaining))
	h.Set("RateLimit-Reset", strconv.FormatInt(int64(math.Ceil(a.resetAfter.Seconds())), 10))
}

// retryAfterSeconds is the real limiter's Retry-After: whole seconds, at
// least 1 (ratelimit.go:138).
func retryAfterSeconds(d time.Duration) string {
	return strconv.Itoa(max(int(d.Seconds()), 1))
}

// ParseFaults reads faults from a comma-separated key=value list, for
// command lines (a demo's or a benchmark's):
//
//	seed=42             seed of the fault generator
//	latency=50ms        added to every call in scope
//	5xx=0.1             share of calls in scope answered 500
//	429=0.1             share of calls in scope answered 429
//	retry-after=2s      the Retry-After of those 429s
//	create-lost=0.1     share of creates whose answer is lost
//	fork-lost=0.1       share of forks whose answer is lost
//	kill-fail=0.1       share of kills that fail on the node (500, then 404)
//	routes=get+kill     limit the faults to these routes
func ParseFaults(spec string) (Faults, error) {
	var f Faults
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		key, val, ok := strings.Cut(part, "=")
		if !ok {
			return Faults{}, fmt.Errorf("fault %q: want key=value", part)
		}
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		var err error
		switch key {
		case "seed":
			f.Seed, err = strconv.ParseInt(val, 10, 64)
		case "latency":
			f.Latency, err = parseDuration(val)
		case "5xx":
			f.Rate5xx, err = parseRate(val)
		case "429":
			f.Rate429, err = parseRate(val)
		case "retry-after":
			f.RetryAfter, err = parseDuration(val)
		case "create-lost":
			f.RateCreateLost, err = parseRate(val)
		case "fork-lost":
			f.RateForkLost, err = parseRate(val)
		case "kill-fail":
			f.RateKillFail, err = parseRate(val)
		case "routes":
			for _, r := range strings.FieldsFunc(val, func(c rune) bool { return c == '+' || c == '|' }) {
				if !slices.Contains(allRoutes, r) {
					return Faults{}, fmt.Errorf("fault routes: unknown route %q (want one of %s)", r, strings.Join(allRoutes, ", "))
				}
				f.Routes = append(f.Routes, r)
			}
		default:
			return Faults{}, fmt.Errorf("fault %q: unknown key (want seed, latency, 5xx, 429, retry-after, create-lost, fork-lost, kill-fail, routes)", key)
		}
		if err != nil {
			return Faults{}, fmt.Errorf("fault %s: %w", key, err)
		}
	}
	return f, nil
}

// String renders f in the syntax ParseFaults reads.
func (f Faults) String() string {
	var parts []string
	add := func(k, v string) { parts = append(parts, k+"="+v) }
	rate := func(k string, r float64) {
		if r > 0 {
			add(k, strconv.FormatFloat(r, 'g', -1, 64))
		}
	}
	dur := func(k string, d time.Duration) {
		if d > 0 {
			add(k, d.String())
		}
	}
	if f.Seed != 0 {
		add("seed", strconv.FormatInt(f.Seed, 10))
	}
	dur("latency", f.Latency)
	rate("5xx", f.Rate5xx)
	rate("429", f.Rate429)
	dur("retry-after", f.RetryAfter)
	rate("create-lost", f.RateCreateLost)
	rate("fork-lost", f.RateForkLost)
	rate("kill-fail", f.RateKillFail)
	if len(f.Routes) > 0 {
		add("routes", strings.Join(f.Routes, "+"))
	}
	return strings.Join(parts, ",")
}

var allRoutes = []string{RouteCreate, RouteList, RouteGet, RouteKill, RoutePause, RouteResume,
	RouteConnect, RouteTimeout, RouteRefresh, RouteFork}

func parseRate(s string) (float64, error) {
	r, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, err
	}
	if !(r >= 0 && r <= 1) {
		return 0, fmt.Errorf("rate %v out of range [0,1]", r)
	}
	return r, nil
}

func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, err
	}
	if d < 0 {
		return 0, fmt.Errorf("negative duration %s", s)
	}
	return d, nil
}
