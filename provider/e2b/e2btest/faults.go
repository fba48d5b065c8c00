package e2btest

import (
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/tether-run/tether/provider/internal/simtest"
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
	// RouteSnapshot is POST /sandboxes/{sandboxID}/snapshots, a named
	// snapshot (handlers/snapshot_template_create.go:25-171).
	RouteSnapshot = "snapshot"
	RouteUnknown  = "unknown"
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
	PatternSnapshot  = "/sandboxes/:sandboxID/snapshots"
)

var patternOf = map[string]string{
	RouteCreate: PatternSandboxes, RouteList: PatternList, RouteGet: PatternSandbox, RouteKill: PatternSandbox,
	RoutePause: PatternPause, RouteResume: PatternResume, RouteConnect: PatternConnect,
	RouteTimeout: PatternTimeout, RouteRefresh: PatternRefresh, RouteFork: PatternFork,
	RouteSnapshot: PatternSnapshot,
}

// blockedAllowed are the routes a blocked team may still call: the
// sandbox routes of the server's allowlist, every read, the list and the
// DELETE (packages/api/internal/middleware/blocked_team.go:14-47).
var blockedAllowed = map[string]bool{RouteGet: true, RouteList: true, RouteKill: true}

// DefaultRetryAfter is the Retry-After a faulted 429 carries when
// Faults.RetryAfter is zero.
const DefaultRetryAfter = time.Second

// DefaultRestoreTime is how long a restore picked by Faults.RateResumeRace
// takes when Faults.RestoreTime is zero.
const DefaultRestoreTime = time.Second

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
	// RateResumeRace of resumes and connects that restore a paused
	// sandbox take RestoreTime of real time, reserved and in no store
	// (orchestrator/create_instance.go:172-505: the node restores before
	// the store Add at :473), the window of infra#3636 at 54693ff3: a
	// DELETE meanwhile finds nothing in the store, deletes the snapshot and
	// answers 204 (handlers/sandbox_kill.go:64-103, redis/state_change.go:
	// 58-62), GET answers 404 and the list omits it, and then the restore
	// lands and the sandbox runs again, billing, until its timeout
	// (Sandbox.Revived). A restore not picked lands at once.
	RateResumeRace float64
	// RestoreTime is how long such a restore takes (DefaultRestoreTime if
	// zero); a real one takes seconds.
	RestoreTime time.Duration
	// Routes limits the faults to these routes (Route*); empty: all.
	Routes []string
}

// Scripted is one answer Inject (or FailNext) queues for a route: given
// after authentication and rate limits, without doing anything.
type Scripted struct {
	Status  int
	Message string // empty: a message like the real server's for the status
	// RetryAfter goes with a 429 (DefaultRetryAfter if zero).
	RetryAfter time.Duration
}

// faultRules are what the shared base needs of E2B's faults: the seed,
// an own copy of the route list, and FailNext's answer.
var faultRules = simtest.FaultRules[Faults, Scripted]{
	Own: func(f Faults) (Faults, int64) {
		f.Routes = slices.Clone(f.Routes)
		return f, f.Seed
	},
	Stream: 0xe2b,
	Status: func(status int) Scripted { return Scripted{Status: status} },
}

// decision is what the faults make of one call.
type decision struct {
	latency    time.Duration
	status     int
	message    string
	retryAfter time.Duration
	lost       bool // create or fork: lose the answer
	killFail   bool
	restore    time.Duration // resume or connect: how long a restore takes
}

func (s *Server) decideLocked(route string) decision {
	var d decision
	f := s.Faults
	inScope := len(f.Routes) == 0 || slices.Contains(f.Routes, route)
	if inScope {
		d.latency = f.Latency
	}
	if (route == RouteResume || route == RouteConnect) && inScope && f.RateResumeRace > 0 && s.Rand.Float64() < f.RateResumeRace {
		d.restore = f.RestoreTime
		if d.restore <= 0 {
			d.restore = DefaultRestoreTime
		}
	}
	if sc, ok := s.Queued.Pop(route); ok {
		d.status, d.message, d.retryAfter = sc.Status, sc.Message, sc.RetryAfter
		return d
	}
	if !inScope {
		return d
	}
	switch {
	case f.Rate5xx > 0 && s.Rand.Float64() < f.Rate5xx:
		d.status = http.StatusInternalServerError
	case f.Rate429 > 0 && s.Rand.Float64() < f.Rate429:
		d.status = http.StatusTooManyRequests
		d.retryAfter = f.RetryAfter
	case route == RouteCreate && f.RateCreateLost > 0 && s.Rand.Float64() < f.RateCreateLost:
		d.lost = true
	case route == RouteFork && f.RateForkLost > 0 && s.Rand.Float64() < f.RateForkLost:
		d.lost = true
	case route == RouteKill && f.RateKillFail > 0 && s.Rand.Float64() < f.RateKillFail:
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
	s.Mu.Lock()
	defer s.Mu.Unlock()
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
//	resume-race=0.5     share of restores (resume, connect) that take restore-time,
//	                    during which a DELETE answers 204 and the restore then lands
//	restore-time=2s     how long those restores take
//	routes=get+kill     limit the faults to these routes
func ParseFaults(spec string) (Faults, error) { return simtest.Parse(spec, (*Faults).fields) }

// String renders f in the syntax ParseFaults reads.
func (f Faults) String() string { return simtest.FormatSpec(f.fields()) }

// fields are the keys of the spec, in the order String writes them.
func (f *Faults) fields() []simtest.Field {
	basic := simtest.Basic{Seed: &f.Seed, Latency: &f.Latency, Rate5xx: &f.Rate5xx, Rate429: &f.Rate429, RetryAfter: &f.RetryAfter}
	return basic.Fields(
		simtest.Rate("create-lost", &f.RateCreateLost),
		simtest.Rate("fork-lost", &f.RateForkLost),
		simtest.Rate("kill-fail", &f.RateKillFail),
		simtest.Rate("resume-race", &f.RateResumeRace),
		simtest.Duration("restore-time", &f.RestoreTime),
		simtest.Routes("routes", &f.Routes, allRoutes),
	)
}

var allRoutes = []string{RouteCreate, RouteList, RouteGet, RouteKill, RoutePause, RouteResume,
	RouteConnect, RouteTimeout, RouteRefresh, RouteFork, RouteSnapshot}
