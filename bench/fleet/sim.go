package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/tether-run/tether/provider/daytona/daytonatest"
	"github.com/tether-run/tether/provider/e2b"
	"github.com/tether-run/tether/provider/e2b/e2btest"
)

// cloud is one simulated account the fleet shares: a Daytona organization
// or an E2B team, served on loopback behind a recorder that counts every
// answer the fleet got, so the figures are the server's, not tether's.
type cloud struct {
	name string // daytona or e2b
	url  string // what tether is given as the provider's API URL
	key  string // the one API key every replica uses, as one Secret would
	rec  *recorder
	hs   *httptest.Server

	daytona *daytonatest.Server
	e2b     *e2btest.Server
}

// fleetKey is the E2B key of the fleet's team (E2B keys are e2b_ + 40 hex).
const fleetKey = "e2b_f1ee7000000000000000000000000000000000aa"

func newCloud(name string, latency time.Duration) (*cloud, error) {
	c := &cloud{name: name, rec: newRecorder(name)}
	var h http.Handler
	switch name {
	case "daytona":
		sim := daytonatest.NewUnstartedServer(daytonatest.WithFaults(daytonatest.Faults{Latency: latency}))
		c.key = "fleet-key"
		sim.AddKey(c.key, "fleet-org")
		c.daytona, h = sim, sim.Handler()
	case "e2b":
		sim := e2btest.NewUnstartedServer(e2btest.WithFaults(e2btest.Faults{Latency: latency}))
		// No concurrency limit in the way: the fleet's sandboxes all run
		// at once (the real default is 20 a team; a fleet buys more).
		sim.AddTeam("fleet-team", e2btest.Limits{Concurrency: 1 << 20})
		c.key = fleetKey
		sim.AddKey(c.key, "fleet-team")
		c.e2b, h = sim, sim.Handler()
	default:
		return nil, fmt.Errorf("cloud %q: want daytona or e2b", name)
	}
	c.hs = httptest.NewServer(c.rec.wrap(h))
	c.url = c.hs.URL
	if c.daytona != nil {
		c.url += "/api"
		c.daytona.URL = c.url
	}
	if c.e2b != nil {
		c.e2b.URL = c.url
	}
	return c, nil
}

func (c *cloud) close() {
	c.hs.Close()
	if c.daytona != nil {
		c.daytona.Close()
	}
	if c.e2b != nil {
		c.e2b.Close()
	}
}

// env points a process at the cloud with the fleet's key.
func (c *cloud) env() []string {
	if c.daytona != nil {
		return []string{"DAYTONA_API_URL=" + c.url, "DAYTONA_API_KEY=" + c.key}
	}
	return []string{"E2B_API_URL=" + c.url, "E2B_API_KEY=" + c.key}
}

// setQuota turns the account's quota on (limit per window) or off (0).
//
// Daytona: the `authenticated` throttler (reads, lists, setters) and
// `sandbox-lifecycle` (DELETE, stop) each get limit per window, per
// organization, as Daytona Cloud's tiers give both the same figure
// (e2b-facts section 9: tier 1 is 10,000 a minute each). `sandbox-create`
// stays off: creates are not part of a drain.
//
// E2B: the routes a drain uses each get a GCRA bucket of limit requests
// per window with a burst of limit, per team (the real limiter's
// {"rate","burst","period_s"}, middleware/ratelimit/ratelimit.go:34-73):
// /sandboxes/:sandboxID (the kill and the read share it) and the lookup
// /v2/sandboxes.
func (c *cloud) setQuota(limit int, window time.Duration) {
	if c.daytona != nil {
		for _, t := range []string{daytonatest.ThrottlerAuthenticated, daytonatest.ThrottlerSandboxLifecycle} {
			c.daytona.SetRateLimit(t, limit, window)
		}
		return
	}
	for _, p := range []string{e2btest.PatternSandbox, e2btest.PatternList} {
		c.e2b.SetRateLimit(p, e2btest.RateLimit{Rate: limit, Burst: limit, Period: window})
	}
}

// sandbox is one sandbox as the simulator's record has it.
type sandbox struct {
	id, name   string
	live       bool          // running or stopped: no delete accepted, not ended
	autoStop   int           // Daytona: minutes (0: off)
	autoDelete int           // Daytona: minutes (-1: off)
	endsIn     time.Duration // E2B: time left of its timeout
	timedOut   bool          // E2B: ended by its timeout, not killed by a request
}

// handedOff reports whether a tether's drain left the sandbox to the
// provider's own timers (reaper.HandedOff): on Daytona auto-stop 1 min and
// auto-delete 0, on E2B a timeout of e2b.HandOffTimeout (at most that
// left, or already ended by it).
func (sb sandbox) handedOff(cloud string) bool {
	if cloud == "daytona" {
		return sb.autoStop == 1 && sb.autoDelete == 0
	}
	return sb.timedOut || sb.live && sb.endsIn <= e2b.HandOffTimeout+time.Second
}

// sandboxes is the simulator's record now.
func (c *cloud) sandboxes() []sandbox {
	var out []sandbox
	if c.daytona != nil {
		for _, sb := range c.daytona.Sandboxes() {
			out = append(out, sandbox{
				id: sb.ID, name: sb.Name,
				live:     !sb.DeleteRequested && sb.State != "destroyed",
				autoStop: sb.AutoStopInterval, autoDelete: sb.AutoDeleteInterval,
			})
		}
		return out
	}
	now := time.Now()
	for _, sb := range c.e2b.Sandboxes() {
		live := sb.State == e2btest.StateRunning || sb.State == e2btest.StatePaused || sb.State == e2btest.StatePausing
		out = append(out, sandbox{id: sb.ID, name: sb.Metadata["tether-name"], live: live, endsIn: sb.EndAt.Sub(now),
			timedOut: sb.KillReason == e2btest.KillTimeout})
	}
	return out
}

// recorder counts the answers of one simulated API while it is on: by
// kind of call and status, and when each sandbox's delete was first
// accepted (the moment its billing ends, on the real servers too).
type recorder struct {
	cloud string

	mu      sync.Mutex
	on      bool
	t0      time.Time
	calls   map[string]int // "delete 200", "get 429", ...
	deleted map[string]time.Duration
	// timeline counts the answers by kind and status per quarter second
	// after t0, for -v.
	timeline map[string][]int
}

func newRecorder(cloud string) *recorder {
	return &recorder{cloud: cloud, calls: map[string]int{}, deleted: map[string]time.Duration{}, timeline: map[string][]int{}}
}

// timelines is the answers by kind and status per quarter second.
func (r *recorder) timelines() map[string][]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]int{}
	for k, v := range r.timeline {
		out[k] = append([]int(nil), v...)
	}
	return out
}

// start counts from now on, with times relative to t0.
func (r *recorder) start(t0 time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on, r.t0 = true, t0
	r.calls = map[string]int{}
	r.deleted = map[string]time.Duration{}
	r.timeline = map[string][]int{}
}

func (r *recorder) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on = false
}

// snapshot is what was counted.
func (r *recorder) snapshot() (calls map[string]int, deleted map[string]time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	calls = make(map[string]int, len(r.calls))
	for k, v := range r.calls {
		calls[k] = v
	}
	deleted = make(map[string]time.Duration, len(r.deleted))
	for k, v := range r.deleted {
		deleted[k] = v
	}
	return calls, deleted
}

func (r *recorder) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, req)
		kind, id := r.classify(req)
		if sw.status == 0 && sw.wrote {
			sw.status = http.StatusOK
		}
		// status 0: the client hung up before an answer (a drain's
		// deadline cancels the calls in flight); the server did nothing.
		r.mu.Lock()
		defer r.mu.Unlock()
		if !r.on {
			return
		}
		k := fmt.Sprintf("%s %d", kind, sw.status)
		r.calls[k]++
		i := int(time.Since(r.t0) / (250 * time.Millisecond))
		for len(r.timeline[k]) <= i {
			r.timeline[k] = append(r.timeline[k], 0)
		}
		r.timeline[k][i]++
		if kind == "delete" && sw.status/100 == 2 {
			if _, ok := r.deleted[id]; !ok {
				r.deleted[id] = time.Since(r.t0)
			}
		}
	})
}

// classify names a request by what a drain does with it: delete, get
// (a read of one sandbox), list (a lookup by name or label), or other
// (setters, timeouts, creates), with the sandbox id of a delete.
func (r *recorder) classify(req *http.Request) (kind, id string) {
	path := strings.TrimPrefix(req.URL.Path, "/api")
	parts := strings.Split(strings.Trim(path, "/"), "/")
	one := len(parts) == 2 && (parts[0] == "sandbox" || parts[0] == "sandboxes")
	switch {
	case req.Method == http.MethodDelete && one:
		return "delete", parts[1]
	case req.Method == http.MethodGet && one:
		return "get", ""
	case req.Method == http.MethodGet && (len(parts) == 1 || path == "/v2/sandboxes"):
		return "list", ""
	}
	return "other", ""
}

type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
