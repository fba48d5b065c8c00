package daytonatest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
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
	RouteUnknown     = "unknown"
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
	// in whole seconds, or as an HTTP date when RetryAfterDate is set.
	RetryAfter     time.Duration
	RetryAfterDate bool
	// RateHang of calls in scope hang until the client gives up.
	RateHang float64
	// CreateLost of creates allocate the sandbox and then answer 500, so the
	// caller never learns its id (the Paperclip seed).
	CreateLost float64
	// CreateHang of creates allocate the sandbox and then hang until the
	// client times out.
	CreateHang float64
	// Destroying is added to the time a deleted sandbox stays `destroying`
	// (Daytona issue #3294: deletes that take a long while).
	Destroying time.Duration
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
type Scripted struct {
	// Status to answer (a 429 carries Retry-After). Ignored when Hang is set.
	Status int
	// Hang until the client gives up (or the server closes) instead of answering.
	Hang bool
	// After: do the work first, then fail or hang; the caller loses the answer
	// of a call that took effect.
	After bool
}

// SetFaults replaces the random faults (and reseeds the generator).
// Queued Scripted faults are kept.
func (s *Server) SetFaults(f Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setFaultsLocked(f)
}

func (s *Server) setFaultsLocked(f Faults) {
	s.faults = f
	s.faults.Routes = slices.Clone(f.Routes)
	s.rng = rand.New(rand.NewPCG(uint64(f.Seed), 0x7e7e7))
}

// Inject queues fault f for each of the next n calls of route.
func (s *Server) Inject(route string, n int, f Scripted) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.scripted[route] = append(s.scripted[route], f)
	}
}

// FailNext makes the next n calls of route answer status without effect.
func (s *Server) FailNext(route string, status, n int) {
	s.Inject(route, n, Scripted{Status: status})
}

// decision is what the fault layer does with one call.
type decision struct {
	latency time.Duration
	before  *Scripted // fail (or hang) without doing the work
	after   *Scripted // do the work, then fail (or hang)
}

// decideLocked draws the faults for one call. It draws the same number of
// random values for every call, so that a seed gives the same sequence.
func (s *Server) decideLocked(route string) decision {
	var d decision
	if q := s.scripted[route]; len(q) > 0 {
		f := q[0]
		s.scripted[route] = q[1:]
		if f.After {
			d.after = &f
		} else {
			d.before = &f
		}
	}
	f := s.faults
	hang, r429, r5xx, lost, chang := s.rng.Float64(), s.rng.Float64(), s.rng.Float64(), s.rng.Float64(), s.rng.Float64()
	inScope := len(f.Routes) == 0 || slices.Contains(f.Routes, route)
	if inScope {
		d.latency = f.Latency
	}
	if d.before != nil || d.after != nil {
		return d
	}
	switch {
	case inScope && hang < f.RateHang:
		d.before = &Scripted{Hang: true}
	case inScope && r429 < f.Rate429:
		d.before = &Scripted{Status: 429}
	case inScope && r5xx < f.Rate5xx:
		d.before = &Scripted{Status: 503}
	case route == RouteCreate && lost < f.CreateLost:
		d.after = &Scripted{Status: 500, After: true}
	case route == RouteCreate && chang < f.CreateHang:
		d.after = &Scripted{Hang: true, After: true}
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
//	retry-after=2s    Retry-After sent with a 429 (retry-after-date=true: as a date)
//	hang=0.01         share of calls that hang
//	create-lost=0.2   share of creates that allocate, then answer 500
//	create-hang=0.1   share of creates that allocate, then hang
//	destroying=2s     extra time a delete stays destroying
//	starting=1s       time a new sandbox stays starting (409 to delete/stop)
//	list-lag=1s       list shows the world this long ago
//	routes=get+delete limit latency/5xx/429/hang to these routes
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
		case "retry-after-date":
			f.RetryAfterDate, err = strconv.ParseBool(val)
		case "hang":
			f.RateHang, err = parseRate(val)
		case "create-lost":
			f.CreateLost, err = parseRate(val)
		case "create-hang":
			f.CreateHang, err = parseRate(val)
		case "destroying":
			f.Destroying, err = parseDuration(val)
		case "starting":
			f.Starting, err = parseDuration(val)
		case "list-lag":
			f.ListLag, err = parseDuration(val)
		case "routes":
			for _, r := range strings.FieldsFunc(val, func(c rune) bool { return c == '+' || c == '|' }) {
				if !slices.Contains(allRoutes, r) {
					return Faults{}, fmt.Errorf("fault routes: unknown route %q (want one of %s)", r, strings.Join(allRoutes, ", "))
				}
				f.Routes = append(f.Routes, r)
			}
		default:
			return Faults{}, fmt.Errorf("fault %q: unknown key (want seed, latency, 5xx, 429, retry-after, retry-after-date, hang, create-lost, create-hang, destroying, starting, list-lag, routes)", key)
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
	if f.RetryAfterDate {
		add("retry-after-date", "true")
	}
	rate("hang", f.RateHang)
	rate("create-lost", f.CreateLost)
	rate("create-hang", f.CreateHang)
	dur("destroying", f.Destroying)
	dur("starting", f.Starting)
	dur("list-lag", f.ListLag)
	if len(f.Routes) > 0 {
		add("routes", strings.Join(f.Routes, "+"))
	}
	return strings.Join(parts, ",")
}

var allRoutes = []string{RouteCreate, RouteList, RouteGet, RouteDelete, RouteStart, RouteStop,
	RouteAutoStop, RouteAutoArchive, RouteAutoDelete, RouteLabels}

func parseRate(s string) (float64, error) {
	r, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, err
	}
	if r < 0 || r > 1 {
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
