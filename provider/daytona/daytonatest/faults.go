package daytonatest

import (
	"slices"
	"time"

	"github.com/tether-run/tether/provider/internal/simtest"
)

// Route names, as counted by Calls and targeted by Inject and Faults.Routes.
const (
	RouteCreate      = "create"
	RouteList        = "list"
	RouteGet         = "get"
	RouteDelete      = "delete"
	RouteStart       = "start"
	RouteStop        = "stop"
	RouteAutoStop    = "autostop"
	RouteAutoArchive = "autoarchive"
	RouteAutoDelete  = "autodelete"
	RouteLabels      = "labels"
	RouteFork        = "fork"
	RouteArchive     = "archive"
	// RouteLastActivity is POST /sandbox/{id}/last-activity (timers.go).
	RouteLastActivity = "last-activity"
	RouteUnknown      = "unknown"
)

// DefaultRetryAfter is the Retry-After a 429 carries when Faults.RetryAfter is zero.
const DefaultRetryAfter = time.Second

// Faults are random failures drawn from a generator seeded with Seed, so a
// sequential test sees the same faults on every run. Rates are shares of
// calls between 0 and 1. The zero value is a healthy server.
type Faults struct {
	Seed int64
	// Latency is added to every call in scope before it is answered.
	Latency time.Duration
	// Rate5xx of calls in scope answer 503 without doing anything.
	Rate5xx float64
	// Rate429 of calls in scope answer 429 with a Retry-After header.
	Rate429 float64
	// RetryAfter is the hint sent with every 429 (DefaultRetryAfter if zero),
	// in whole seconds, as Retry-After-<throttler of the route> like the real
	// server's throttler guard (@nestjs/throttler v6 handleRequest; Daytona's
	// throttlers in quota.go). The organization is then inside a throttle
	// window until RetryAfter has passed (see ThrottleStats.InWindow); unlike
	// a quota's (WithRateLimit), the window does not refuse other requests.
	// PlainRetryAfter sends a plain Retry-After instead, as only the
	// failed-auth throttler does; RetryAfterDate a plain one as an HTTP date.
	RetryAfter      time.Duration
	PlainRetryAfter bool
	RetryAfterDate  bool
	// RateHang of calls in scope hang until the client gives up.
	RateHang float64
	// CreateLost of creates allocate the sandbox and then answer 500, so the
	// caller never learns its id (a create that times out after Daytona allocated the sandbox).
	CreateLost float64
	// CreateHang of creates allocate the sandbox and then hang until the
	// client times out.
	CreateHang float64
	// CreateFailStart of creates make the sandbox, which then fails to start
	// (state error), and answer 400 "Sandbox failed to start: <reason>"
	// although the sandbox exists (sandbox.controller.ts:1547-1551).
	CreateFailStart float64
	// Rate404 of calls naming a sandbox that exists answer 404 anyway: the
	// access guard turns any error, a database or cache hiccup, into 404
	// (common/guards/resource-access.guard.ts:21-26, sandbox-access.guard.ts:69-70).
	Rate404 float64
	// Rate403 of calls answer 403 "Invalid authentication context": the
	// organization lookup failed (a Redis or database error is taken as "no
	// organization", organization-auth-context.guard.ts:119-122, 53-56).
	Rate403 float64
	// RateModified of setter calls (autostop, autoarchive, autodelete,
	// labels) answer 409 "Sandbox was modified by another operation": the
	// conditional update found the row changed (sandbox.repository.ts:113-116).
	RateModified float64
	// DestroyLag adds up to this long, drawn per delete from the seed, to the
	// time the destroy action takes to start (WithDestroyLag): an archived
	// sandbox shows `archived` that much longer after its delete.
	DestroyLag time.Duration
	// Destroying is added to the time a deleted sandbox stays `destroying`
	// (Daytona issue #3294: deletes that take a long while).
	Destroying time.Duration
	// DestroyFail of deletes accepted for a sandbox on a runner fail there
	// (the runner's destroy throws, not a 404): the destroy action writes
	// state error whatever the desired state (sandbox.manager.ts:1088-1099
	// at v0.190.0), an error clears pending (sandbox.entity.ts:438-444), and
	// the sync crons pick only pending sandboxes (:851-856), so it is never
	// tried again. From then on GET answers 404 (sandbox.service.ts:
	// 1777-1784), the list shows it only with includeErroredDeleted, and the
	// sandbox may still run on its runner until its row is purged 7 days
	// later (:2935-2961). Drawn from the seed per delete.
	DestroyFail float64
	// Starting keeps every new sandbox `starting` this long after `creating`;
	// meanwhile delete and stop answer 409 (state change in progress). POST
	// /sandbox waits for it like any start, up to the create wait (30 s by
	// default; see WithCreateWait). Hold(id, "starting", 0) pins one sandbox.
	Starting time.Duration
	// ListLag makes GET /sandbox show the world as it was ListLag ago: a new
	// sandbox shows up, and a deleted one disappears, only after the lag.
	ListLag time.Duration
	// Routes limits Latency, Rate5xx, Rate429 and RateHang to these routes
	// (Route* names); empty means every route.
	Routes []string
}

// Scripted is a one-off fault queued with Inject for the next calls of a route.
// Each status is answered where the real server would produce it: 429 by
// the throttler, 403 by the organization guard ("Invalid authentication
// context" unless Message says otherwise), 404 by the sandbox access guard
// (for a sandbox that exists), 409 by the handler ("Sandbox was modified by
// another operation"); others before authentication.
type Scripted struct {
	// Status to answer (a 429 carries the throttler's headers). Ignored when
	// Hang or FailStart is set.
	Status int
	// Message replaces the status's usual message.
	Message string
	// FailStart (create only): the sandbox is made, fails to start, and the
	// create answers 400 "Sandbox failed to start: ..." although it exists.
	FailStart bool
	// Hang until the client gives up (or the server closes) instead of answering.
	Hang bool
	// After: do the work first, then fail or hang; the caller loses the answer
	// of a call that took effect.
	After bool
}

// faultRules are what the shared base needs of Daytona's faults: the
// seed, an own copy of the route list, and FailNext's answer.
var faultRules = simtest.FaultRules[Faults, Scripted]{
	Own: func(f Faults) (Faults, int64) {
		f.Routes = slices.Clone(f.Routes)
		return f, f.Seed
	},
	Stream: 0x7e7e7,
	Status: func(status int) Scripted { return Scripted{Status: status} },
}

// decision is what the fault layer does with one call.
type decision struct {
	latency   time.Duration
	before    *Scripted // fail (or hang) without doing the work
	after     *Scripted // do the work, then fail (or hang)
	failStart bool      // create: the sandbox fails to start
	lag       float64   // share of Faults.DestroyLag a delete waits
}

// sandboxRoutes are the routes that name a sandbox, behind the access guard.
// The list is not among them: GET /sandbox has only the organization guard
// (sandbox.controller.ts:130-146 at v0.190.0), so no spurious 404.
var sandboxRoutes = []string{RouteGet, RouteDelete, RouteStart, RouteStop, RouteAutoStop, RouteAutoArchive, RouteAutoDelete, RouteLabels, RouteFork, RouteArchive}

// setterRoutes update a sandbox with a conditional write.
var setterRoutes = []string{RouteAutoStop, RouteAutoArchive, RouteAutoDelete, RouteLabels}

// decideLocked draws the faults for one call. It draws the same number of
// random values for every call, so that a seed gives the same sequence.
func (s *Server) decideLocked(route string) decision {
	var d decision
	if f, ok := s.Queued.Pop(route); ok {
		switch {
		case f.FailStart:
			d.failStart = true
		case f.After:
			d.after = &f
		default:
			d.before = &f
		}
	}
	f := s.Faults
	hang, r429, r5xx, lost, chang := s.Rand.Float64(), s.Rand.Float64(), s.Rand.Float64(), s.Rand.Float64(), s.Rand.Float64()
	r404, r403, rmod, rfail := s.Rand.Float64(), s.Rand.Float64(), s.Rand.Float64(), s.Rand.Float64()
	d.lag = s.Rand.Float64()
	inScope := len(f.Routes) == 0 || slices.Contains(f.Routes, route)
	if inScope {
		d.latency = f.Latency
	}
	if d.before != nil || d.after != nil || d.failStart {
		return d
	}
	switch {
	case inScope && hang < f.RateHang:
		d.before = &Scripted{Hang: true}
	case inScope && r429 < f.Rate429:
		d.before = &Scripted{Status: 429}
	case inScope && r5xx < f.Rate5xx:
		d.before = &Scripted{Status: 503}
	case inScope && r403 < f.Rate403:
		d.before = &Scripted{Status: 403}
	case inScope && r404 < f.Rate404 && slices.Contains(sandboxRoutes, route):
		d.before = &Scripted{Status: 404}
	case inScope && rmod < f.RateModified && slices.Contains(setterRoutes, route):
		d.before = &Scripted{Status: 409}
	case route == RouteCreate && lost < f.CreateLost:
		d.after = &Scripted{Status: 500, After: true}
	case route == RouteCreate && chang < f.CreateHang:
		d.after = &Scripted{Hang: true, After: true}
	case route == RouteCreate && rfail < f.CreateFailStart:
		d.failStart = true
	}
	return d
}

// ParseFaults reads faults from a short text spec, as given to
// `tether demo --faults`: comma-separated key=value pairs.
//
//	seed=1            generator seed
//	latency=50ms      added to every call
//	5xx=0.05          share of calls answered 503
//	429=0.1           share of calls answered 429
//	retry-after=2s    Retry-After-<throttler> sent with a 429 (plain-retry-after=true:
//	                  a plain Retry-After; retry-after-date=true: a plain one as a date)
//	hang=0.01         share of calls that hang
//	create-lost=0.2   share of creates that allocate, then answer 500
//	create-hang=0.1   share of creates that allocate, then hang
//	create-fail-start=0.1 share of creates that fail to start (400, sandbox in error)
//	404=0.01          share of calls on a sandbox answered 404 though it exists
//	403=0.01          share of calls answered 403 "Invalid authentication context"
//	modified=0.1      share of setter calls answered 409 "modified by another operation"
//	destroy-lag=10s   up to this much extra time a deleted sandbox keeps its old state
//	destroying=2s     extra time a delete stays destroying
//	destroy-fail=0.1  share of deletes that fail on the runner (error, hidden, never retried)
//	starting=1s       time a new sandbox stays starting (409 to delete/stop)
//	list-lag=1s       list shows the world this long ago
//	routes=get+delete limit latency/5xx/429/hang to these routes
func ParseFaults(spec string) (Faults, error) { return simtest.Parse(spec, (*Faults).fields) }

// String renders f in the syntax ParseFaults reads.
func (f Faults) String() string { return simtest.FormatSpec(f.fields()) }

// fields are the keys of the spec, in the order String writes them.
func (f *Faults) fields() []simtest.Field {
	basic := simtest.Basic{Seed: &f.Seed, Latency: &f.Latency, Rate5xx: &f.Rate5xx, Rate429: &f.Rate429, RetryAfter: &f.RetryAfter}
	return basic.Fields(
		simtest.Flag("plain-retry-after", &f.PlainRetryAfter),
		simtest.Flag("retry-after-date", &f.RetryAfterDate),
		simtest.Rate("hang", &f.RateHang),
		simtest.Rate("create-lost", &f.CreateLost),
		simtest.Rate("create-hang", &f.CreateHang),
		simtest.Rate("create-fail-start", &f.CreateFailStart),
		simtest.Rate("404", &f.Rate404),
		simtest.Rate("403", &f.Rate403),
		simtest.Rate("modified", &f.RateModified),
		simtest.Duration("destroying", &f.Destroying),
		simtest.Rate("destroy-fail", &f.DestroyFail),
		simtest.Duration("destroy-lag", &f.DestroyLag),
		simtest.Duration("starting", &f.Starting),
		simtest.Duration("list-lag", &f.ListLag),
		simtest.Routes("routes", &f.Routes, allRoutes),
	)
}

var allRoutes = []string{RouteCreate, RouteList, RouteGet, RouteDelete, RouteStart, RouteStop,
	RouteAutoStop, RouteAutoArchive, RouteAutoDelete, RouteLabels, RouteFork, RouteArchive}
