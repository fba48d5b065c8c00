package daytonatest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tether-run/tether/provider/internal/simtest"
)

// maxBody bounds a request body; the real API's bodies are small.
const maxBody = 1 << 20

// Paging bounds of GET /sandbox, as in the spec.
const (
	defaultPageLimit = 100
	maxPageLimit     = 200
)

type ctxKey struct{}

// routes builds the API. Every request goes through the fault layer and the
// authentication check before its handler.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	handle := func(pattern, route string, h http.HandlerFunc) {
		mux.Handle(pattern, routeTag{route, h})
	}
	handle("POST /api/sandbox", RouteCreate, s.create)
	handle("GET /api/sandbox", RouteList, s.list)
	handle("GET /api/sandbox/{idOrName}", RouteGet, s.get)
	handle("DELETE /api/sandbox/{idOrName}", RouteDelete, s.delete)
	handle("POST /api/sandbox/{idOrName}/start", RouteStart, s.start)
	handle("POST /api/sandbox/{idOrName}/stop", RouteStop, s.stop)
	handle("POST /api/sandbox/{idOrName}/autostop/{interval}", RouteAutoStop, s.setInterval(RouteAutoStop))
	handle("POST /api/sandbox/{idOrName}/autoarchive/{interval}", RouteAutoArchive, s.setInterval(RouteAutoArchive))
	handle("POST /api/sandbox/{idOrName}/autodelete/{interval}", RouteAutoDelete, s.setInterval(RouteAutoDelete))
	handle("PUT /api/sandbox/{idOrName}/labels", RouteLabels, s.replaceLabels)
	handle("POST /api/sandbox/{idOrName}/last-activity", RouteLastActivity, s.lastActivity)
	handle("POST /api/sandbox/{idOrName}/fork", RouteFork, s.fork)
	handle("POST /api/sandbox/{idOrName}/archive", RouteArchive, s.archive)
	handle("GET /api/api-keys/current", RouteAPIKey, s.currentAPIKey)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.serve(mux, w, r)
	})
}

// routeTag names a handler's route for counting and fault targeting.
type routeTag struct {
	route string
	h     http.HandlerFunc
}

func (t routeTag) ServeHTTP(w http.ResponseWriter, r *http.Request) { t.h(w, r) }

func (s *Server) serve(mux *http.ServeMux, w http.ResponseWriter, r *http.Request) {
	h, pattern := mux.Handler(r)
	route := RouteUnknown
	if t, ok := h.(routeTag); ok && pattern != "" {
		route = t.route
	}

	// Read the body up front: only once it is read does net/http notice a
	// client that hangs up, which a hung request waits for.
	if r.Body != nil {
		b, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
		if err != nil {
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
	}

	s.Mu.Lock()
	target := pathTarget(r.URL.Path)
	if route == RouteUnknown {
		target = ""
	}
	s.Counted.Add(route, target)
	d := s.decideLocked(route)
	faults := s.Faults
	s.Mu.Unlock()

	if !s.wait(r, d.latency) {
		return
	}
	// A scripted or seeded failure, answered at the stage where the real
	// server produces it.
	stage := stageOf(d.before)
	fail := func(f *Scripted) {
		if f.Hang {
			s.hang(r.Context())
			return
		}
		writeError(w, r, f.Status, messageOf(f, r))
	}
	if stage == stageFirst {
		fail(d.before)
		return
	}

	// The failed-auth middleware runs before authentication
	// (failed-auth-rate-limit.middleware.ts:52-70).
	addr := clientAddr(r)
	s.Mu.Lock()
	blocked, secs := s.failedAuthBlockedLocked(addr, s.Now())
	s.Mu.Unlock()
	if blocked {
		s.refuseFailedAuth(w, r, secs)
		return
	}
	org, status, perms := s.authenticate(r)
	if status == http.StatusUnauthorized {
		// Every 401 is counted; the one that reaches the limit answers 429
		// instead (filters/all-exceptions.filter.ts:49-60).
		s.Mu.Lock()
		over, secs := s.failedAuthLocked(addr, s.Now())
		s.Mu.Unlock()
		if over {
			s.refuseFailedAuth(w, r, secs)
			return
		}
	}
	if status == http.StatusForbidden {
		// A JWT for an organization it is not a member of: the
		// organization guard finds no membership
		// (organization-auth-context.guard.ts:58-61).
		writeError(w, r, status, "Invalid authentication context")
		return
	}
	if status != 0 {
		writeError(w, r, status, http.StatusText(status))
		return
	}
	if route == RouteUnknown {
		writeError(w, r, http.StatusNotFound, fmt.Sprintf("Cannot %s %s", r.Method, r.URL.Path))
		return
	}

	// The throttler: the organization's quota, then a seeded or scripted 429.
	if !s.throttle(w, r, org, route, stage == stageThrottle, faults) {
		return
	}

	// The organization guard: a failed lookup of the organization is 403
	// "Invalid authentication context" (organization-auth-context.guard.ts:
	// 48-61); a key without the route's permission 403 "Access denied" (:63-65).
	if stage == stageOrgGuard {
		fail(d.before)
		return
	}
	if need := permissionOf(route); need != "" && perms != nil && !slices.Contains(perms, need) {
		writeError(w, r, http.StatusForbidden, "Access denied")
		return
	}
	// The sandbox access guard answers 404 for any error it meets
	// (resource-access.guard.ts:21-26), also for a sandbox that exists.
	if stage == stageAccessGuard {
		fail(d.before)
		return
	}

	r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, reqInfo{org: org, d: d}))
	if stage == stageHandler {
		// The handler's conditional update found the row changed.
		fail(d.before)
		return
	}
	// The mux again, not h: only its ServeHTTP sets the path values.
	if d.after == nil {
		mux.ServeHTTP(w, r)
		return
	}
	// The work is done, then the answer is replaced: the caller loses it.
	mux.ServeHTTP(httptest.NewRecorder(), r)
	fail(d.after)
}

// Stages of a request at which a scripted or seeded failure is answered.
const (
	stageNone = iota
	stageFirst
	stageThrottle
	stageOrgGuard
	stageAccessGuard
	stageHandler
)

func stageOf(f *Scripted) int {
	switch {
	case f == nil:
		return stageNone
	case f.Hang:
		return stageFirst
	case f.Status == http.StatusTooManyRequests:
		return stageThrottle
	case f.Status == http.StatusForbidden:
		return stageOrgGuard
	case f.Status == http.StatusNotFound:
		return stageAccessGuard
	case f.Status == http.StatusConflict:
		return stageHandler
	}
	return stageFirst
}

// messageOf is what the real server says with a status.
func messageOf(f *Scripted, r *http.Request) string {
	if f.Message != "" {
		return f.Message
	}
	switch {
	case f.Status == http.StatusForbidden:
		return "Invalid authentication context" // invalid-authentication-context.exception.ts
	case f.Status == http.StatusNotFound:
		return fmt.Sprintf("Sandbox with ID or name %s not found", pathTarget(r.URL.Path))
	case f.Status == http.StatusConflict:
		return "Sandbox was modified by another operation" // sandbox/errors/sandbox-conflict.error.ts
	case f.Status >= 500:
		return "Internal server error"
	}
	return http.StatusText(f.Status)
}

// pathTarget is the {idOrName} of a /api/sandbox/{idOrName}[/...] path.
func pathTarget(path string) string {
	rest, ok := strings.CutPrefix(path, "/api/sandbox/")
	if !ok {
		return ""
	}
	target, _, _ := strings.Cut(rest, "/")
	return target
}

// permissionOf is the permission a route requires, "" for none.
func permissionOf(route string) string {
	switch route {
	case RouteDelete:
		return PermDeleteSandboxes
	case RouteCreate, RouteStart, RouteStop, RouteAutoStop, RouteAutoArchive, RouteAutoDelete, RouteLabels,
		RouteFork, RouteArchive:
		// sandbox.controller.ts:796 (fork), 1144 (archive).
		return PermWriteSandboxes
	}
	return ""
}

// throttle applies the route's throttler for the organization: a quota set
// with WithRateLimit, then a seeded or scripted 429 (fault). It writes the
// X-RateLimit headers of an allowed request, or the 429, and reports
// whether the request goes on.
func (s *Server) throttle(w http.ResponseWriter, r *http.Request, org, route string, fault bool, f Faults) bool {
	name := throttlerOf(route)
	s.Mu.Lock()
	now := s.Now()
	s.noteArrivalLocked(org, name, now)
	q, limited := s.quotas[name]
	var refused bool
	var remaining, secs int
	if limited {
		refused, remaining, secs = s.countLocked(org, name, q, now)
	}
	if !refused && fault {
		refused = true
		retry := f.RetryAfter
		if retry <= 0 {
			retry = DefaultRetryAfter
		}
		secs = ceilSeconds(retry)
		s.announceLocked(org, name, now.Add(retry))
	} else if refused {
		s.announceLocked(org, name, now.Add(time.Duration(secs)*time.Second))
	}
	s.Mu.Unlock()

	if !refused {
		if limited {
			setRateLimitHeaders(w.Header(), name, q.Limit, remaining, secs)
		}
		return true
	}
	switch {
	case fault && f.RetryAfterDate:
		w.Header().Set("Retry-After", time.Now().Add(time.Duration(secs)*time.Second).UTC().Format(http.TimeFormat))
	case fault && f.PlainRetryAfter:
		w.Header().Set("Retry-After", strconv.Itoa(secs))
	default:
		// throttler.guard.ts handleRequest (v6): Retry-After-<name> on a
		// blocked request, no X-RateLimit headers.
		w.Header().Set("Retry-After-"+name, strconv.Itoa(secs))
	}
	writeError(w, r, http.StatusTooManyRequests, "ThrottlerException: Too Many Requests")
	return false
}

// refuseFailedAuth answers a client blocked for failed authentications:
// 429 with a plain Retry-After and the failed-auth X-RateLimit headers
// (failed-auth-tracker.service.ts:78-87).
func (s *Server) refuseFailedAuth(w http.ResponseWriter, r *http.Request, secs int) {
	s.Mu.Lock()
	s.announceLocked(clientAddr(r), ThrottlerFailedAuth, s.Now().Add(time.Duration(secs)*time.Second))
	limit := s.failedAuth.Limit
	s.Mu.Unlock()
	setRateLimitHeaders(w.Header(), ThrottlerFailedAuth, limit, 0, secs)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	writeError(w, r, http.StatusTooManyRequests, "ThrottlerException: Too Many Requests")
}

// authenticate returns the organization the bearer token acts in and the
// key's permissions (nil: all), or the status to refuse with.
func (s *Server) authenticate(r *http.Request) (string, int, []string) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		return "", http.StatusUnauthorized, nil
	}
	s.Mu.Lock()
	defer s.Mu.Unlock()
	if org, ok := s.Keys[token]; ok {
		perms, scoped := s.perms[token]
		if !scoped {
			perms = nil
		}
		return org, 0, perms
	}
	if orgs, ok := s.jwts[token]; ok {
		org := r.Header.Get("X-Daytona-Organization-ID")
		if org == "" || !slices.Contains(orgs, org) {
			return "", http.StatusForbidden, nil
		}
		return org, 0, nil
	}
	return "", http.StatusUnauthorized, nil
}

// wait sleeps for d; false when the client hung up first. A server that
// closes first drops the connection (abort).
func (s *Server) wait(r *http.Request, d time.Duration) bool {
	if s.Host.Wait(r.Context(), d) {
		return true
	}
	if r.Context().Err() == nil {
		abort() // the server closed
	}
	return false
}

// hang blocks until the client gives up or the server closes.
func (s *Server) hang(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-s.Host.Closed():
		abort()
	}
}

// abort drops the connection without an answer, as a server going away
// does; net/http recovers this panic quietly.
func abort() { panic(http.ErrAbortHandler) }

// reqInfo is what the layers before a handler learned of its request.
type reqInfo struct {
	org string
	d   decision
}

func infoOf(r *http.Request) reqInfo { i, _ := r.Context().Value(ctxKey{}).(reqInfo); return i }

func orgOf(r *http.Request) string { return infoOf(r).org }

// errorJSON is the real server's error body.
type errorJSON struct {
	StatusCode int    `json:"statusCode"`
	Message    string `json:"message"`
	Error      string `json:"error"`
	Path       string `json:"path"`
	Timestamp  string `json:"timestamp"`
}

func writeError(w http.ResponseWriter, r *http.Request, status int, msg string) {
	writeJSON(w, status, errorJSON{
		StatusCode: status, Message: msg, Error: http.StatusText(status),
		Path: r.URL.Path, Timestamp: stamp(time.Now()),
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// createRequest is the CreateSandbox schema, the parts the simulator keeps.
type createRequest struct {
	Name                *string           `json:"name"`
	Snapshot            string            `json:"snapshot"`
	User                string            `json:"user"`
	Env                 map[string]string `json:"env"`
	Labels              map[string]string `json:"labels"`
	Public              bool              `json:"public"`
	NetworkBlockAll     bool              `json:"networkBlockAll"`
	Target              string            `json:"target"`
	CPU                 *int              `json:"cpu"`
	GPU                 *int              `json:"gpu"`
	Memory              *int              `json:"memory"`
	Disk                *int              `json:"disk"`
	AutoStopInterval    *int              `json:"autoStopInterval"`
	AutoArchiveInterval *int              `json:"autoArchiveInterval"`
	AutoDeleteInterval  *int              `json:"autoDeleteInterval"`
}

func decodeBody(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		return err
	}
	if len(b) == 0 {
		return fmt.Errorf("empty body")
	}
	return json.Unmarshal(b, v)
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var req createRequest
	if err := decodeBody(r, &req); err != nil {
		writeError(w, r, http.StatusBadRequest, "Invalid request body: "+err.Error())
		return
	}
	for _, iv := range []struct {
		name string
		v    *int
	}{{"autoStopInterval", req.AutoStopInterval}, {"autoArchiveInterval", req.AutoArchiveInterval}} {
		if iv.v != nil && *iv.v < 0 {
			writeError(w, r, http.StatusBadRequest, iv.name+" must be a non-negative integer")
			return
		}
	}
	if req.GPU != nil && *req.GPU > 0 && (req.AutoDeleteInterval == nil || *req.AutoDeleteInterval != 0) {
		// sandbox.service.ts:524-526, before anything is stored.
		writeError(w, r, http.StatusBadRequest, "GPU sandboxes must be ephemeral - set autoDeleteInterval to 0")
		return
	}
	org := orgOf(r)

	s.Mu.Lock()
	now := s.Now()
	// The unique index on (organizationId, name) refuses the insert
	// (sandbox.service.ts:683, 711-713): nothing is stored.
	if req.Name != nil && *req.Name != "" && s.byNameLocked(org, *req.Name, now) != nil {
		s.Mu.Unlock()
		writeError(w, r, http.StatusConflict, fmt.Sprintf("Sandbox with name %s already exists", *req.Name))
		return
	}
	rec := s.newRecordLocked(org, now)
	if req.Name != nil && *req.Name != "" {
		rec.name = *req.Name
	}
	rec.labels = simtest.CopyMap(req.Labels)
	rec.env = simtest.CopyMap(req.Env)
	rec.public, rec.networkBlockAll = req.Public, req.NetworkBlockAll
	if req.Target != "" {
		rec.target = req.Target
	}
	if req.Snapshot != "" {
		rec.snapshot = req.Snapshot
	}
	if c, ok := s.snapshotClass[rec.snapshot]; ok {
		rec.class = c
	}
	if req.User != "" {
		rec.user = req.User
	}
	setIf(&rec.cpu, req.CPU)
	setIf(&rec.gpu, req.GPU)
	setIf(&rec.memory, req.Memory)
	setIf(&rec.disk, req.Disk)
	setIf(&rec.autoStop, req.AutoStopInterval)
	setIf(&rec.autoArchive, req.AutoArchiveInterval)
	setIf(&rec.autoDelete, req.AutoDeleteInterval)
	rec.autoArchive = resolveAutoArchive(rec.autoArchive)
	rec.record(now)
	// The answer is the sandbox as inserted (state unknown, shown as
	// creating: sandbox.dto.ts:392-395), not as it is after the wait: the
	// controller waits for started but returns what the create returned
	// (sandbox.controller.ts:305-310; waitForSandboxStarted's result is
	// dropped). Only its refusal of a failed start is used.
	out := rec.clone().sandboxJSON()
	failStart := infoOf(r).d.failStart
	if failStart {
		// The sandbox exists but never starts: the runner reports an error
		// (sandbox.controller.ts:1547-1551 answers the create then).
		rec.steps = []step{{at: now.Add(s.createDelay), state: stateError}}
		rec.errorReason = startFailure
	} else if starting := s.Faults.Starting; starting > 0 {
		ready := now.Add(s.createDelay)
		rec.steps = []step{{at: ready, state: stateStarting}, {at: ready.Add(starting), state: stateStarted}}
	} else {
		s.scheduleNatural(rec, now)
	}
	id := rec.id
	startedAt, known := rec.startedAt()
	if failStart {
		startedAt, known = now.Add(s.createDelay), true
	}
	untilStarted := startedAt.Sub(now)
	wait := s.createWait
	s.Mu.Unlock()

	// Like the real server, answer once the sandbox is started (or the wait
	// is over). A client that gives up meanwhile leaves the sandbox behind.
	if known {
		wait = min(wait, untilStarted)
	}
	if !s.wait(r, wait) {
		return
	}
	s.Mu.Lock()
	rec, _ = s.Store.At(id, s.Now())
	failed, reason := rec.state == stateError, rec.errorReason
	s.Mu.Unlock()
	if failed {
		// The sandbox exists (in state error) although the create failed
		// (sandbox.controller.ts:1547-1551).
		writeError(w, r, http.StatusBadRequest, "Sandbox failed to start: "+reason)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// startFailure is the error reason of a sandbox made to fail its start.
const startFailure = "simulated start failure: the runner could not start the sandbox"

// maxAutoArchive is what an auto-archive interval of 0 means, and the cap
// of any other: the maximum, 30 days (config/configuration.ts:97).
const maxAutoArchive = 30 * 24 * 60

// resolveAutoArchive is sandbox.service.ts:3298-3312 without the negative
// check, which callers make first.
func resolveAutoArchive(minutes int) int {
	if minutes == 0 {
		return maxAutoArchive
	}
	return min(minutes, maxAutoArchive)
}

// startedAt is when the scheduled steps reach `started`.
func (r *record) startedAt() (time.Time, bool) {
	if r.state == stateStarted {
		return time.Time{}, true
	}
	if r.held {
		return time.Time{}, false
	}
	for _, st := range r.steps {
		if st.state == stateStarted {
			return st.at, true
		}
	}
	return time.Time{}, false
}

func setIf(dst *int, v *int) {
	if v != nil {
		*dst = *v
	}
}

// withSandbox resolves {idOrName} in the caller's organization and runs f
// under the lock; it answers 404 for an unknown or destroyed sandbox.
func (s *Server) withSandbox(w http.ResponseWriter, r *http.Request, f func(rec *record, now time.Time)) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	now := s.Now()
	idOrName := r.PathValue("idOrName")
	rec := s.lookupLocked(orgOf(r), idOrName, now)
	if rec == nil {
		writeError(w, r, http.StatusNotFound, fmt.Sprintf("Sandbox with ID or name %s not found", idOrName))
		return
	}
	f(rec, now)
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	s.withSandbox(w, r, func(rec *record, _ time.Time) {
		writeJSON(w, http.StatusOK, rec.clone().sandboxJSON())
	})
}

const msgInProgress = "Sandbox state change in progress" // exceptions/state-change-in-progress.exception.ts

// delete follows SandboxService.destroy (sandbox.service.ts:2013-2040).
func (s *Server) delete(w http.ResponseWriter, r *http.Request) {
	s.withSandbox(w, r, func(rec *record, now time.Time) {
		// A pending sandbox, a second delete among them, is refused
		// (:2016-2018): the first delete is still under way. An archiving
		// sandbox is not pending, so its delete is accepted.
		if rec.pending || (inProgress[rec.state] && rec.state != stateArchiving) {
			writeError(w, r, http.StatusConflict, msgInProgress)
			return
		}
		// Forks not deleted yet keep their parent (:2020-2029).
		for c := range s.Store.All() {
			if c.parent == rec.id && c.desiredState != stateDestroyed {
				writeError(w, r, http.StatusBadRequest, "Cannot delete sandbox which has active fork children. The forks must be deleted first.")
				return
			}
		}
		lag := s.destroyLag + time.Duration(infoOf(r).d.lag*float64(s.Faults.DestroyLag))
		rec.deleteBy(DeletedByAPI + callerOf(r))
		rec.beginDestroy(now, lag)
		// The answer is the renamed sandbox in its old state (:2031-2039).
		writeJSON(w, http.StatusOK, rec.clone().sandboxJSON())
	})
}

// stop follows SandboxService.stop (sandbox.service.ts:2151-2188).
func (s *Server) stop(w http.ResponseWriter, r *http.Request) {
	s.withSandbox(w, r, func(rec *record, now time.Time) {
		switch {
		case rec.state == stateError || rec.state == stateBuildFailed:
			// :2154 (assertSandboxNotErrored, :163-167)
			writeError(w, r, http.StatusBadRequest, "Sandbox is in an errored state")
			return
		case rec.state != rec.desiredState || inProgress[rec.state]:
			// :2156-2158; a renamed sandbox still in its old state is here.
			writeError(w, r, http.StatusConflict, msgInProgress)
			return
		case rec.state != stateStarted && rec.state != statePaused:
			// :2160-2162: stopped and archived sandboxes among them.
			writeError(w, r, http.StatusBadRequest, "Sandbox is not in a stoppable state")
			return
		case rec.pending:
			writeError(w, r, http.StatusConflict, msgInProgress)
			return
		}
		if rec.autoDelete == 0 {
			// An ephemeral sandbox is deleted by its stop (:2169-2171).
			rec.deleteBy(DeletedByEphemeralStop + " from " + callerOf(r))
			rec.beginDestroy(now, s.destroyLag)
		} else {
			s.transition(rec, now, stateStopping)
			rec.pending = true
		}
		writeJSON(w, http.StatusOK, rec.clone().sandboxJSON())
	})
}

// start follows SandboxService.start (sandbox.service.ts:2042-2149) and its
// controller (sandbox.controller.ts:511-522): a sandbox that must boot
// (stopped, errored) is answered once it has started, or after the same
// 30 s wait as a create, with the sandbox as it is then; a failed start
// answers 400. An archived one (restoring) and a started one answer at
// once.
func (s *Server) start(w http.ResponseWriter, r *http.Request) {
	s.Mu.Lock()
	now := s.Now()
	idOrName := r.PathValue("idOrName")
	rec := s.lookupLocked(orgOf(r), idOrName, now)
	if rec == nil {
		s.Mu.Unlock()
		writeError(w, r, http.StatusNotFound, fmt.Sprintf("Sandbox with ID or name %s not found", idOrName))
		return
	}
	switch {
	case rec.state == stateStarted && rec.desiredState == stateStarted:
		// Already started: answered as it is, nothing changes (:2056-2058).
		out := rec.clone().sandboxJSON()
		s.Mu.Unlock()
		writeJSON(w, http.StatusOK, out)
		return
	case rec.state == stateError || rec.state == stateBuildFailed:
		// :2060 (assertSandboxNotErrored, :163-167)
		s.Mu.Unlock()
		writeError(w, r, http.StatusBadRequest, "Sandbox is in an errored state")
		return
	case rec.state == stateArchiving && rec.desiredState == stateArchived:
		// An archiving sandbox may be started (sandbox.service.ts:2064-2073).
		s.transition(rec, now, stateRestoring)
	case rec.pending || inProgress[rec.state]:
		s.Mu.Unlock()
		writeError(w, r, http.StatusConflict, msgInProgress)
		return
	case rec.state == stateStopped:
		s.transition(rec, now, stateStarting)
	case rec.state == stateArchived:
		s.transition(rec, now, stateRestoring)
	case rec.state == statePaused:
		s.transition(rec, now, stateResuming)
	}
	rec.lastActivityAt = now
	out := rec.clone().sandboxJSON()
	var wait time.Duration
	if rec.state == stateStarting {
		wait = s.createWait
		if at, ok := rec.startedAt(); ok {
			wait = min(wait, at.Sub(now))
		}
	}
	id := rec.id
	s.Mu.Unlock()
	if wait > 0 {
		if !s.wait(r, wait) {
			return
		}
		s.Mu.Lock()
		rec, _ = s.Store.At(id, s.Now())
		out = rec.clone().sandboxJSON()
		failed := rec.state == stateError
		s.Mu.Unlock()
		if failed {
			writeError(w, r, http.StatusBadRequest, "Sandbox failed to start: "+out.ErrorReason)
			return
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// transition starts a state change requested through the API.
func (s *Server) transition(rec *record, now time.Time, state string) {
	if rec.state != state {
		rec.stateChanged(now)
	}
	rec.state = state
	rec.desiredState = desiredFor(state)
	rec.errorReason = ""
	rec.updatedAt = now
	rec.held = false
	rec.record(now)
	s.scheduleNatural(rec, now)
}

func (s *Server) setInterval(route string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		f, err := strconv.ParseFloat(r.PathValue("interval"), 64)
		if err != nil || f != math.Trunc(f) || math.Abs(f) > math.MaxInt32 {
			writeError(w, r, http.StatusBadRequest, "interval must be an integer number of minutes")
			return
		}
		minutes := int(f)
		// sandbox.service.ts:3290-3301 (the check runs after the lookup
		// there; the answer is the same).
		if minutes < 0 && route == RouteAutoStop {
			writeError(w, r, http.StatusBadRequest, "Auto-stop interval must be non-negative")
			return
		}
		if minutes < 0 && route == RouteAutoArchive {
			writeError(w, r, http.StatusBadRequest, "Auto-archive interval must be non-negative")
			return
		}
		s.withSandbox(w, r, func(rec *record, now time.Time) {
			switch route {
			case RouteAutoStop:
				rec.autoStop = minutes
			case RouteAutoArchive:
				rec.autoArchive = resolveAutoArchive(minutes)
			case RouteAutoDelete:
				if rec.gpu > 0 {
					// sandbox.service.ts:3053-3058: a GPU sandbox stays ephemeral.
					writeError(w, r, http.StatusBadRequest, "GPU sandboxes must remain ephemeral")
					return
				}
				rec.autoDelete = minutes
			}
			rec.updatedAt = now
			rec.record(now)
			if route == RouteAutoDelete && minutes == 0 && rec.state == stateStopped && !rec.deleteRequested {
				// A stopped sandbox that becomes ephemeral is deleted at once.
				rec.deleteBy("auto-delete 0 from " + callerOf(r))
				rec.beginDestroy(now, s.destroyLag)
			}
			// NestJS answers a POST without @HttpCode with 201
			// (sandbox.controller.ts:937-1071 declare none).
			writeJSON(w, http.StatusCreated, rec.clone().sandboxJSON())
		})
	}
}

func (s *Server) replaceLabels(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Labels map[string]string `json:"labels"`
	}
	if err := decodeBody(r, &req); err != nil || req.Labels == nil {
		writeError(w, r, http.StatusBadRequest, "labels must be an object of strings")
		return
	}
	// A full replace: every label not in the body is gone
	// (sandbox.service.ts:2837-2850). The answer is the whole sandbox
	// (sandbox.controller.ts:676-687), although the spec names the
	// SandboxLabels schema; it has a labels property, so clients decode it.
	s.withSandbox(w, r, func(rec *record, now time.Time) {
		rec.labels = simtest.CopyMap(req.Labels)
		rec.updatedAt = now
		rec.record(now)
		writeJSON(w, http.StatusOK, rec.clone().sandboxJSON())
	})
}

// listJSON is the ListSandboxesResponse schema; nextCursor is null on the last page.
type listJSON struct {
	Items      []listItemJSON `json:"items"`
	NextCursor *string        `json:"nextCursor"`
}

// list serves GET /sandbox from the lagged view: the world as it was
// Faults.ListLag ago. Pages are keyset-paged on the sort order, so a cursor
// stays valid while sandboxes come and go.
func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := defaultPageLimit
	if v := q.Get("limit"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 1 || f > maxPageLimit {
			writeError(w, r, http.StatusBadRequest, fmt.Sprintf("limit must be a number between 1 and %d", maxPageLimit))
			return
		}
		limit = int(f)
	}
	var labels map[string]string
	if v := q.Get("labels"); v != "" {
		if err := json.Unmarshal([]byte(v), &labels); err != nil {
			writeError(w, r, http.StatusBadRequest, "labels must be a JSON object of strings")
			return
		}
	}
	includeErrored := q.Get("includeErroredDeleted") == "true"
	states := q["states"]
	sortField, order := q.Get("sort"), q.Get("order")
	// Sorted by last activity, newest first, unless asked otherwise
	// (sandbox/dto/list-sandboxes-query.dto.ts:14-29, 303-324).
	if sortField == "" {
		sortField = "lastActivityAt"
	}
	if order == "" {
		order = "desc"
	}
	if !slices.Contains(sortFields, sortField) {
		writeError(w, r, http.StatusBadRequest, "sort must be one of "+strings.Join(sortFields, ", "))
		return
	}
	if order != "asc" && order != "desc" {
		writeError(w, r, http.StatusBadRequest, "order must be one of asc, desc")
		return
	}
	var after *cursor
	if v := q.Get("cursor"); v != "" {
		c, err := parseCursor(v)
		if err != nil || c.Sort != sortField || c.Order != order {
			writeError(w, r, http.StatusBadRequest, "Invalid cursor")
			return
		}
		after = &c
	}
	idPrefix, namePrefix := strings.ToLower(q.Get("id")), strings.ToLower(q.Get("name"))

	s.Mu.Lock()
	now := s.Now()
	seen := now.Add(-s.Faults.ListLag)
	type row struct {
		v   view
		seq uint64
	}
	var rows []row
	for _, rec := range s.orgRecordsLocked(orgOf(r), now) {
		v, ok := rec.viewAt(seen)
		if !ok || v.state == stateDestroyed {
			continue
		}
		// Destroyed sandboxes are never listed; ones deleted in an errored
		// state only when asked (list-sandboxes-query.dto.ts:31-33, 80-91).
		// A destroying one is, under its DESTROYED_ name, labels kept
		// (sandbox-typeorm-search.adapter.ts:100-131,
		// sandbox-opensearch-search.adapter.ts:156-189).
		if !includeErrored && v.erroredDeleted() {
			continue
		}
		if !strings.HasPrefix(strings.ToLower(v.id), idPrefix) || !strings.HasPrefix(strings.ToLower(v.name), namePrefix) {
			continue
		}
		if len(states) > 0 && !slices.Contains(states, v.state) {
			continue
		}
		if !hasLabels(v.labels, labels) {
			continue
		}
		rows = append(rows, row{v, rec.seq})
	}
	s.Mu.Unlock()

	less := func(a, b cursor) bool {
		if a.Key != b.Key {
			return a.Key < b.Key
		}
		return a.Seq < b.Seq
	}
	if order == "desc" {
		asc := less
		less = func(a, b cursor) bool { return asc(b, a) }
	}
	key := func(x row) cursor {
		return cursor{Sort: sortField, Order: order, Seq: x.seq, Key: sortKey(x.v, sortField)}
	}
	sort.Slice(rows, func(i, j int) bool { return less(key(rows[i]), key(rows[j])) })
	if after != nil {
		i := sort.Search(len(rows), func(i int) bool { return less(*after, key(rows[i])) })
		rows = rows[i:]
	}
	out := listJSON{Items: []listItemJSON{}}
	for i, x := range rows {
		if i == limit {
			next := key(rows[i-1]).encode()
			out.NextCursor = &next
			break
		}
		out.Items = append(out.Items, x.v.listItemJSON())
	}
	writeJSON(w, http.StatusOK, out)
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// sortFields are the list's sort fields (SandboxListSortField in the spec).
var sortFields = []string{"name", "cpu", "memoryGib", "diskGib", "lastActivityAt", "createdAt"}

// sortKey is v's value of a sort field as a string that sorts the same way.
func sortKey(v view, field string) string {
	num := func(n int64) string { return fmt.Sprintf("%020d", n) }
	switch field {
	case "name":
		return v.name
	case "cpu":
		return num(int64(v.cpu))
	case "memoryGib":
		return num(int64(v.memory))
	case "diskGib":
		return num(int64(v.disk))
	case "lastActivityAt":
		return num(v.lastActivityAt.UnixNano())
	}
	return num(v.createdAt.UnixNano())
}

// cursor is the position after which the next page starts.
type cursor struct {
	Sort  string `json:"s"`
	Order string `json:"o"`
	Seq   uint64 `json:"q"`
	Key   string `json:"k"`
}

func (c cursor) encode() string {
	b, _ := json.Marshal(c) // a struct of strings and a number always marshals
	return base64.RawURLEncoding.EncodeToString(b)
}

func parseCursor(s string) (cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return cursor{}, err
	}
	var c cursor
	err = json.Unmarshal(b, &c)
	return c, err
}
