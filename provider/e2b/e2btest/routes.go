package e2btest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/tether-run/tether/provider/internal/simtest"
)

// call is one authenticated request as a handler sees it.
type call struct {
	team, key string
	limits    Limits
	d         decision
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sandboxes", s.route(RouteCreate, s.create))
	mux.HandleFunc("GET /v2/sandboxes", s.route(RouteList, s.list))
	mux.HandleFunc("GET /sandboxes/{sandboxID}", s.route(RouteGet, s.get))
	mux.HandleFunc("DELETE /sandboxes/{sandboxID}", s.route(RouteKill, s.kill))
	mux.HandleFunc("POST /sandboxes/{sandboxID}/pause", s.route(RoutePause, s.pause))
	mux.HandleFunc("POST /sandboxes/{sandboxID}/resume", s.route(RouteResume, s.resume))
	mux.HandleFunc("POST /sandboxes/{sandboxID}/connect", s.route(RouteConnect, s.connect))
	mux.HandleFunc("POST /sandboxes/{sandboxID}/timeout", s.route(RouteTimeout, s.setTimeout))
	mux.HandleFunc("POST /sandboxes/{sandboxID}/refreshes", s.route(RouteRefresh, s.refresh))
	mux.HandleFunc("POST /sandboxes/{sandboxID}/fork", s.route(RouteFork, s.fork))
	mux.HandleFunc("POST /sandboxes/{sandboxID}/snapshots", s.route(RouteSnapshot, s.snapshot))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.Mu.Lock()
		s.Counted.Add(RouteUnknown, "")
		s.Mu.Unlock()
		writeError(w, http.StatusNotFound, "Not found")
	})
	return mux
}

// route wraps a handler with what every call goes through, in the real
// server's order: authentication (X-API-Key, or Bearer with X-Team-ID),
// then the per-team rate limit of the route (middleware/ratelimit/
// ratelimit.go:79-96 skips unauthenticated requests), then a blocked
// team's allowlist (packages/api/main.go:200-208), then the faults.
func (s *Server) route(name string, h func(http.ResponseWriter, *http.Request, *call)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.Mu.Lock()
		s.Counted.Add(name, r.PathValue("sandboxID"))
		d := s.decideLocked(name)
		s.Mu.Unlock()
		if d.latency > 0 && !s.wait(r, d.latency) {
			return
		}

		c := &call{d: d}
		status, msg := s.authenticate(r, c)
		if status != 0 {
			writeError(w, status, msg)
			return
		}
		s.Mu.Lock()
		a, l, hasLimit := s.allowLocked(c.team, patternOf[name], s.Now())
		s.Mu.Unlock()
		if hasLimit {
			setRateLimitHeaders(w.Header(), l, a)
			if a.limited {
				w.Header().Set("Retry-After", retryAfterSeconds(a.retryAfter))
				writeError(w, http.StatusTooManyRequests, "Rate limit exceeded")
				return
			}
		}
		s.Mu.Lock()
		reason, blocked := s.blocked[c.team]
		s.Mu.Unlock()
		if blocked && !blockedAllowed[name] {
			// packages/auth/pkg/auth/internal/team/state.go:28-39
			msg := "team is blocked"
			if reason != "" {
				msg += ": " + reason
			}
			writeError(w, http.StatusForbidden, msg)
			return
		}
		if d.status != 0 {
			msg := d.message
			switch {
			case d.status == http.StatusTooManyRequests:
				ra := d.retryAfter
				if ra <= 0 {
					ra = DefaultRetryAfter
				}
				w.Header().Set("Retry-After", retryAfterSeconds(ra))
				w.Header().Set("RateLimit-Remaining", "0")
				w.Header().Set("RateLimit-Reset", retryAfterSeconds(ra))
				if msg == "" {
					msg = "Rate limit exceeded"
				}
			case msg == "":
				msg = http.StatusText(d.status)
			}
			writeError(w, d.status, msg)
			return
		}
		h(w, r, c)
	}
}

// authenticate finds the caller's team, as the spec's security of every
// sandbox route allows it (spec/openapi.yml:10-42, e.g. :2361-2366): an
// API key (X-API-Key), tried first, else an auth provider's token
// (Authorization: Bearer) whose user is a member of the team X-Team-ID
// names. No credentials, a malformed or unknown key, and a token that is
// unknown or not a member of that team answer 401
// (packages/auth/pkg/auth/internal/service/service.go:99-127, 174-258;
// internal/middleware/middleware.go:41, 69-71). A blocked team
// authenticates as any other (its allowlist is checked after the rate
// limit, route).
func (s *Server) authenticate(r *http.Request, c *call) (int, string) {
	key := r.Header.Get("X-API-Key")
	bearer, hasBearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if key == "" && hasBearer && strings.TrimSpace(bearer) != "" {
		return s.authenticateBearer(strings.TrimSpace(bearer), r.Header.Get("X-Team-ID"), c)
	}
	if key == "" {
		return http.StatusUnauthorized, "Authorization header is missing"
	}
	if !strings.HasPrefix(key, "e2b_") {
		return http.StatusUnauthorized, "Invalid API key format"
	}
	s.Mu.Lock()
	defer s.Mu.Unlock()
	team, ok := s.Keys[key]
	if !ok {
		return http.StatusUnauthorized, "Cannot get the team for the given API key"
	}
	c.team, c.key, c.limits = team, key, s.teams[team]
	return 0, ""
}

// authenticateBearer is the AuthProviderBearerAuth + AuthProviderTeamAuth
// pair: the token's user must be a member of the team X-Team-ID names
// (service.go:219-258, GetTeamByIDAndUserID), else 401 "Backend
// authentication failed".
func (s *Server) authenticateBearer(token, team string, c *call) (int, string) {
	if team == "" {
		return http.StatusUnauthorized, "Authorization header is missing"
	}
	s.Mu.Lock()
	defer s.Mu.Unlock()
	if !slices.Contains(s.bearers[token], team) {
		return http.StatusUnauthorized, "Backend authentication failed"
	}
	c.team, c.key, c.limits = team, "bearer:"+token, s.teams[team]
	return 0, ""
}

// wait sleeps d of real time; false when the client or the server went
// away first.
func (s *Server) wait(r *http.Request, d time.Duration) bool { return s.Host.Wait(r.Context(), d) }

// errorJSON is the Error schema, every error's body
// (packages/shared/pkg/apierrors/apierrors.go:26-41).
type errorJSON struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, errorJSON{Code: status, Message: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// notFoundMsg is the real server's 404 text, the same for a sandbox that
// never existed and one of another team (utils/messages.go:9-11).
func notFoundMsg(id string) string {
	return fmt.Sprintf("Sandbox %q doesn't exist or you don't have access to it", id)
}

var sandboxIDRegex = regexp.MustCompile(`^[a-z0-9]+$`)

// shortID reads the {sandboxID} of the path as the real server does: an
// "<id>-<client id>" form is cut to the id, more dashes or other
// characters answer 400 "Invalid sandbox ID" (utils/split.go:10-26,
// packages/shared/pkg/id/id.go:19, 33-39).
func shortID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("sandboxID")
	parts := strings.Split(id, "-")
	if len(parts) > 2 || !sandboxIDRegex.MatchString(parts[0]) {
		writeError(w, http.StatusBadRequest, "Invalid sandbox ID")
		return "", false
	}
	return parts[0], true
}

// sandboxBody reads the {sandboxID} of the path (shortID), then the JSON
// body into v (decodeBody); false when it answered an error instead.
func sandboxBody(w http.ResponseWriter, r *http.Request, v any, optional bool) (string, bool) {
	id, ok := shortID(w, r)
	if !ok {
		return "", false
	}
	return id, decodeBody(w, r, v, optional)
}

// sandboxTimeout is sandboxBody with an optional body, and the timeout
// that body gave at *raw (parseTimeout), for a call that starts a sandbox
// (resume, fork).
func sandboxTimeout(w http.ResponseWriter, r *http.Request, c *call, v any, raw **int32) (string, time.Duration, bool) {
	id, ok := sandboxBody(w, r, v, true)
	if !ok {
		return "", 0, false
	}
	timeout, ok := parseTimeout(w, *raw, c.limits.MaxLengthHours)
	return id, timeout, ok
}

// decodeBody parses a JSON body; an empty body is allowed when optional.
// Failures answer 400 "Error when parsing request: ..."
// (handlers/sandbox_create.go:76-83).
func decodeBody(w http.ResponseWriter, r *http.Request, v any, optional bool) bool {
	b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err == nil && len(strings.TrimSpace(string(b))) == 0 {
		if optional {
			return true
		}
		err = io.ErrUnexpectedEOF
	}
	if err == nil {
		err = json.Unmarshal(b, v)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "Error when parsing request: "+err.Error())
		return false
	}
	return true
}

// parseTimeout is validateAndParseTimeout (handlers/timeout_helper.go:18-39):
// none is the server's default, 15 s; 0 or less is refused; more than the
// team's maximum length is refused (400, and false).
func parseTimeout(w http.ResponseWriter, raw *int32, maxHours int) (time.Duration, bool) {
	if raw == nil {
		return ServerDefaultTimeout, true
	}
	t := time.Duration(*raw) * time.Second
	switch {
	case *raw <= 0:
		writeError(w, http.StatusBadRequest, "Timeout must be greater than 0")
	case t > time.Duration(maxHours)*time.Hour:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Timeout cannot be greater than %d hours", maxHours))
	default:
		return t, true
	}
	return 0, false
}

// missing: rec answers 404 to every call, as a sandbox that never
// existed, another team's (nil), one in flight or one killed, and one
// being restored after a DELETE removed its snapshot.
func missing(rec *record) bool {
	return rec == nil || rec.state == StateCreating || rec.state == StateKilled ||
		rec.state == StateResuming && !rec.snapshot
}

// reachableLocked finds the team's sandbox id, advanced to now, for a
// call that acts on it (pause, resume, fork): one that is missing or being
// killed answers 404, and nil.
func (s *Server) reachableLocked(w http.ResponseWriter, c *call, id string, now time.Time) *record {
	rec := s.lookupLocked(c.team, id, now)
	if missing(rec) || rec.state == StateKilling {
		writeError(w, http.StatusNotFound, notFoundMsg(id))
		return nil
	}
	return rec
}

// restoring waits for the restore of rec in flight, if any, with the lock
// released: a resume or connect of a sandbox being restored joins that
// start (orchestrator/create_instance.go:217-247, waitForStart). It returns
// with the lock held.
func (s *Server) restoringLocked(rec *record) {
	for rec.state == StateResuming && rec.restored != nil {
		done := rec.restored
		s.Mu.Unlock()
		select {
		case <-done:
		case <-s.Host.Closed():
		}
		s.Mu.Lock()
		select {
		case <-s.Host.Closed():
			return
		default:
		}
	}
}

// concurrencyLeftLocked reports whether the team may start one more
// sandbox: the reservations of creates in flight count with the running
// ones (orchestrator/create_instance.go:188-204).
func (s *Server) concurrencyLeftLocked(c *call, now time.Time) bool {
	n := 0
	for _, r := range s.teamRecordsLocked(c.team, now) {
		switch r.state {
		case StateCreating, StateRunning, StatePausing, StateKilling, StateResuming:
			n++
		}
	}
	return n < c.limits.Concurrency
}

func concurrencyMsg(limit int) string {
	return fmt.Sprintf("you have reached the maximum number of concurrent E2B sandboxes (%d). If you need more, "+
		"please visit 'https://e2b.dev/docs/billing'", limit)
}

type newSandboxJSON struct {
	TemplateID      string            `json:"templateID"`
	Timeout         *int32            `json:"timeout"`
	AutoPause       *bool             `json:"autoPause"`
	AutoPauseMemory *bool             `json:"autoPauseMemory"`
	Metadata        map[string]string `json:"metadata"`
}

// create is POST /sandboxes (handlers/sandbox_create.go:64-354).
func (s *Server) create(w http.ResponseWriter, r *http.Request, c *call) {
	var body newSandboxJSON
	if !decodeBody(w, r, &body, false) {
		return
	}
	if body.TemplateID == "" {
		// The spec's request validator: templateID is required.
		writeError(w, http.StatusBadRequest, "Error when parsing request: templateID is required")
		return
	}
	timeout, ok := parseTimeout(w, body.Timeout, c.limits.MaxLengthHours)
	if !ok {
		return
	}
	autoPause := body.AutoPause != nil && *body.AutoPause // sandboxtypes/states.go:104
	if body.AutoPauseMemory != nil && !*body.AutoPauseMemory && !autoPause {
		// handlers/sandbox_create.go:171-178
		writeError(w, http.StatusBadRequest, "autoPauseMemory=false only applies when autoPause is true.")
		return
	}

	s.Mu.Lock()
	now := s.Now()
	if !s.concurrencyLeftLocked(c, now) {
		s.Mu.Unlock()
		writeError(w, http.StatusTooManyRequests, concurrencyMsg(c.limits.Concurrency))
		return
	}
	// Reserved, not stored: until the node answers, GET and DELETE of the
	// id answer 404 and the list omits it (create_instance.go:192, 473).
	rec := s.newRecordLocked(c.team, now)
	rec.template = body.TemplateID
	rec.metadata = simtest.CopyMap(body.Metadata)
	rec.autoPause = autoPause
	gate := s.createGate
	s.Mu.Unlock()

	// The node's answer. A client that gives up does not stop it: the
	// sandbox is made all the same, the case of a lost create.
	s.await(s.createDelay, gate)

	s.Mu.Lock()
	now = s.Now()
	// The timeout counts from the node's answer (create_instance.go:406-409).
	rec.state = StateRunning
	rec.startedAt, rec.endAt = now, now.Add(timeout)
	rec.lost = c.d.lost
	out := rec.sandbox()
	s.Mu.Unlock()
	if c.d.lost {
		dropConnection(w)
		return
	}
	writeJSON(w, http.StatusCreated, out)
}

// await is the node's work on a request: d of real time, then, while a
// Hold* holds this kind of request (gate is not nil), until it is
// released; or until the server closes. A client that gives up does not
// stop it.
func (s *Server) await(d time.Duration, gate chan struct{}) {
	if !s.Host.Wait(context.Background(), d) || gate == nil {
		return
	}
	select {
	case <-gate:
	case <-s.Host.Closed():
	}
}

// dropConnection closes the connection without an answer.
func dropConnection(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

// get is GET /sandboxes/{sandboxID} (handlers/sandbox_get.go:94-268): a
// running or pausing sandbox from the store (pausing reads as paused), a
// paused one from its snapshot, one being restored too while its snapshot
// is there; one being killed, one in flight, one of another team, and one
// that is gone answer 404 alike.
func (s *Server) get(w http.ResponseWriter, r *http.Request, c *call) {
	id, ok := shortID(w, r)
	if !ok {
		return
	}
	s.Mu.Lock()
	rec := s.lookupLocked(c.team, id, s.Now())
	if rec == nil || !rec.visible() {
		s.Mu.Unlock()
		writeError(w, http.StatusNotFound, notFoundMsg(r.PathValue("sandboxID")))
		return
	}
	out := rec.detail()
	s.Mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

// kill is DELETE /sandboxes/{sandboxID} (handlers/sandbox_kill.go:39-104):
// it kills the sandbox in the store, if any, then deletes every snapshot
// of it, and answers 204 if either was there, else 404. A sandbox already
// being killed answers 204 (orchestrator/delete_instance.go:44-51).
func (s *Server) kill(w http.ResponseWriter, r *http.Request, c *call) {
	id, ok := shortID(w, r)
	if !ok {
		return
	}
	s.Mu.Lock()
	now := s.Now()
	rec := s.lookupLocked(c.team, id, now)
	if missing(rec) {
		s.Mu.Unlock()
		writeError(w, http.StatusNotFound, notFoundMsg(id))
		return
	}
	switch rec.state {
	case StateKilling:
		s.Mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
		return
	case StateResuming:
		// Not in the store: RemoveSandbox finds nothing to lock
		// (redis/state_change.go:58-62) and the snapshot is deleted
		// (sandbox_kill.go:84-96): 204, while the restore goes on and
		// lands running (infra#3636, open at 54693ff3).
		rec.snapshot = false
		rec.killedBy = KilledByAPI + simtest.Caller(r)
		rec.raced = true
		s.Mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
		return
	case StatePaused:
		rec.kill(now, KillRequest, KilledByAPI+simtest.Caller(r))
		s.Mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if c.d.killFail {
		// The store forgets it before the node is asked
		// (delete_instance.go:104-106); the node's failure is a 500.
		rec.kill(now, "orphaned", "")
		rec.orphaned = true
		s.Mu.Unlock()
		writeError(w, http.StatusInternalServerError, "Error killing sandbox: failed to kill sandbox on node")
		return
	}
	rec.state = StateKilling
	gate := s.killGate
	s.Mu.Unlock()
	s.await(s.killDelay, gate)
	s.Mu.Lock()
	rec.kill(s.Now(), KillRequest, KilledByAPI+simtest.Caller(r))
	s.Mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// pause is POST /sandboxes/{sandboxID}/pause
// (handlers/sandbox_pause.go:26-132): a running sandbox is pausing until
// its snapshot is taken, then paused; a paused one answers 409 "already
// paused"; one in another transition 409; one being killed, gone, or of
// another team 404.
func (s *Server) pause(w http.ResponseWriter, r *http.Request, c *call) {
	var body struct {
		Memory *bool `json:"memory"`
	}
	id, ok := sandboxBody(w, r, &body, true)
	if !ok {
		return
	}
	s.Mu.Lock()
	rec := s.reachableLocked(w, c, id, s.Now())
	switch {
	case rec == nil:
		s.Mu.Unlock()
		return
	case rec.state == StatePaused || rec.state == StateResuming:
		// Not in the store, a snapshot there (sandbox_pause.go:96-115).
		s.Mu.Unlock()
		writeError(w, http.StatusConflict, fmt.Sprintf("Error pausing sandbox - sandbox '%s' is already paused", id))
		return
	case rec.state == StatePausing:
		s.Mu.Unlock()
		writeError(w, http.StatusConflict, fmt.Sprintf("Sandbox '%s' cannot be paused while in '%s' state", id, StatePausing))
		return
	}
	rec.state = StatePausing
	gate := s.pauseGate
	s.Mu.Unlock()
	s.await(s.pauseDelay, gate)
	s.Mu.Lock()
	if rec.state == StatePausing { // a kill meanwhile wins (sandboxtypes/states.go:95-99)
		rec.takeSnapshot(s.Now())
		rec.state, rec.endAt = StatePaused, rec.snapAt
		rec.pauses++
	}
	s.Mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// restoreLocked resumes a paused sandbox under its own id, with its
// snapshot's metadata and auto-pause unless autoPause overrides it
// (handlers/sandbox_resume.go:123-181, 313-316; connect cannot override,
// sandbox_connect.go:169), for timeout counted from the node's answer.
// A restore the faults picked (d.restore) takes that long, with the lock
// released: StateResuming, reserved and in no store, so that a DELETE
// meanwhile deletes the snapshot and answers 204 while the restore goes
// on (Faults.RateResumeRace); HoldRestores holds every restore so. It
// returns with the lock held and the sandbox running.
func (s *Server) restoreLocked(rec *record, d decision, timeout time.Duration, autoPause *bool) {
	rec.autoPause = rec.snapAutoPause
	if autoPause != nil {
		rec.autoPause = *autoPause
	}
	if gate := s.restoreGate; d.restore > 0 || gate != nil {
		rec.state = StateResuming
		rec.restored = make(chan struct{})
		s.Mu.Unlock()
		s.await(d.restore, gate)
		s.Mu.Lock()
		close(rec.restored)
		rec.restored = nil
		if rec.raced {
			rec.raced = false
			rec.revived++
		}
	}
	now := s.Now()
	rec.state = StateRunning
	rec.startedAt, rec.endAt = now, now.Add(timeout)
	rec.resumes++
}

// resume is POST /sandboxes/{sandboxID}/resume (handlers/sandbox_resume.go:30-181).
func (s *Server) resume(w http.ResponseWriter, r *http.Request, c *call) {
	var body struct {
		Timeout   *int32 `json:"timeout"`
		AutoPause *bool  `json:"autoPause"`
	}
	id, timeout, ok := sandboxTimeout(w, r, c, &body, &body.Timeout)
	if !ok {
		return
	}
	s.Mu.Lock()
	defer s.Mu.Unlock()
	now := s.Now()
	rec := s.reachableLocked(w, c, id, now)
	if rec != nil && rec.state == StateResuming {
		s.restoringLocked(rec)
		writeJSON(w, http.StatusCreated, rec.sandbox())
		return
	}
	switch {
	case rec == nil:
		return
	case rec.state == StateRunning:
		writeError(w, http.StatusConflict, fmt.Sprintf("Sandbox %s is already running", id))
		return
	case rec.state == StatePausing:
		writeError(w, http.StatusConflict, fmt.Sprintf("Sandbox %q is being paused", id))
		return
	}
	if !s.concurrencyLeftLocked(c, now) {
		writeError(w, http.StatusTooManyRequests, concurrencyMsg(c.limits.Concurrency))
		return
	}
	s.restoreLocked(rec, c.d, timeout, body.AutoPause)
	writeJSON(w, http.StatusCreated, rec.sandbox())
}

// connect is POST /sandboxes/{sandboxID}/connect
// (handlers/sandbox_connect.go:25-183): a running sandbox's timeout is
// only lengthened (200), a paused one is resumed (201).
func (s *Server) connect(w http.ResponseWriter, r *http.Request, c *call) {
	var body struct {
		Timeout *int32 `json:"timeout"`
	}
	if !decodeBody(w, r, &body, false) {
		return
	}
	if body.Timeout == nil || *body.Timeout < 0 {
		writeError(w, http.StatusBadRequest, "Error when parsing request: timeout is required")
		return
	}
	timeout := time.Duration(*body.Timeout) * time.Second
	if timeout > time.Duration(c.limits.MaxLengthHours)*time.Hour {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Timeout cannot be greater than %d hours", c.limits.MaxLengthHours))
		return
	}
	id, ok := shortID(w, r)
	if !ok {
		return
	}
	s.Mu.Lock()
	defer s.Mu.Unlock()
	now := s.Now()
	rec := s.lookupLocked(c.team, id, now)
	switch {
	case missing(rec):
		writeError(w, http.StatusNotFound, notFoundMsg(id))
		return
	case rec.state == StateKilling:
		writeError(w, http.StatusConflict, fmt.Sprintf("Sandbox %q is being killed", id))
		return
	case rec.state == StateResuming:
		s.restoringLocked(rec)
		writeJSON(w, http.StatusCreated, rec.sandbox())
		return
	case rec.state == StateRunning:
		if status, msg := s.keepAliveLocked(rec, c, now, timeout, false); status != 0 {
			writeError(w, status, msg)
			return
		}
		writeJSON(w, http.StatusOK, rec.sandbox())
		return
	}
	if !s.concurrencyLeftLocked(c, now) {
		writeError(w, http.StatusTooManyRequests, concurrencyMsg(c.limits.Concurrency))
		return
	}
	s.restoreLocked(rec, c.d, timeout, nil)
	writeJSON(w, http.StatusCreated, rec.sandbox())
}

// keepAliveLocked is KeepAliveFor (orchestrator/keep_alive.go:19-80): the
// new end is now+d, capped by the team's maximum length from the start;
// a sandbox older than that answers 400; without allowShorter an earlier
// end is ignored.
func (s *Server) keepAliveLocked(rec *record, c *call, now time.Time, d time.Duration, allowShorter bool) (int, string) {
	if rec.state != StateRunning {
		state := rec.state
		switch state {
		case StateKilling:
			return http.StatusConflict, fmt.Sprintf("Sandbox %q is being killed", rec.id)
		case StatePausing:
			return http.StatusConflict, fmt.Sprintf("Sandbox %q is being paused", rec.id)
		}
		return http.StatusNotFound, notFoundMsg(rec.id)
	}
	maxLen := time.Duration(c.limits.MaxLengthHours) * time.Hour
	ttl := max(min(maxLen-now.Sub(rec.startedAt), d), 0)
	if now.Sub(rec.startedAt) > maxLen {
		return http.StatusBadRequest, "Max instance length exceeded"
	}
	end := now.Add(ttl)
	if !allowShorter && end.Before(rec.endAt) {
		return 0, ""
	}
	rec.endAt = end
	return 0, ""
}

// setTimeout is POST /sandboxes/{sandboxID}/timeout
// (handlers/sandbox_timeout.go:17-61): the sandbox ends timeout seconds
// from now, sooner or later than before (KeepAliveFor with allowShorter,
// :52); 0 ends it at once. A negative one is refused by the spec's
// request validator before the handler (spec/openapi.yml:889-898, minimum
// 0; packages/api/main.go:180-196), so the handler's own "< 0 is 0"
// (:46-50) is never reached. Only a sandbox in the store has a timeout: a
// paused one answers 404.
func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request, c *call) {
	var body struct {
		Timeout *int32 `json:"timeout"`
	}
	id, ok := sandboxBody(w, r, &body, false)
	if !ok {
		return
	}
	if body.Timeout == nil {
		writeError(w, http.StatusBadRequest, "Error when parsing request: timeout is required")
		return
	}
	if *body.Timeout < 0 {
		// utils/error.go:112
		writeError(w, http.StatusBadRequest, "validation error: timeout: number must be at least 0")
		return
	}
	s.keepAlive(w, c, id, time.Duration(*body.Timeout)*time.Second, true)
}

// keepAlive applies a keep-alive to an id and answers 204 or the error.
func (s *Server) keepAlive(w http.ResponseWriter, c *call, id string, d time.Duration, allowShorter bool) {
	s.Mu.Lock()
	now := s.Now()
	rec := s.lookupLocked(c.team, id, now)
	if rec == nil || !rec.inStore() {
		s.Mu.Unlock()
		writeError(w, http.StatusNotFound, notFoundMsg(id))
		return
	}
	status, msg := s.keepAliveLocked(rec, c, now, d, allowShorter)
	s.Mu.Unlock()
	if status != 0 {
		writeError(w, status, msg)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// refresh is POST /sandboxes/{sandboxID}/refreshes
// (handlers/sandbox_refresh.go:18-66): it only lengthens, by at least the
// server's default 15 s; the spec bounds duration to 3600.
func (s *Server) refresh(w http.ResponseWriter, r *http.Request, c *call) {
	var body struct {
		Duration *int `json:"duration"`
	}
	id, ok := sandboxBody(w, r, &body, true)
	if !ok {
		return
	}
	d := ServerDefaultTimeout
	if body.Duration != nil {
		if *body.Duration < 0 || *body.Duration > 3600 {
			writeError(w, http.StatusBadRequest, "Error when parsing request: duration must be between 0 and 3600")
			return
		}
		d = max(time.Duration(*body.Duration)*time.Second, ServerDefaultTimeout)
	}
	s.keepAlive(w, c, id, d, false)
}

type forkResultJSON struct {
	Sandbox *sandboxJSON `json:"sandbox,omitempty"`
	Error   *errorJSON   `json:"error,omitempty"`
}

// fork is POST /sandboxes/{sandboxID}/fork (handlers/sandbox_fork.go:37-186):
// the running parent keeps its id and timeout; each fork is a new sandbox
// started from the parent's snapshot, so it carries the parent's metadata
// (handlers/sandbox_fork.go:164, handlers/sandbox_resume.go:340).
func (s *Server) fork(w http.ResponseWriter, r *http.Request, c *call) {
	var body struct {
		Timeout *int32 `json:"timeout"`
		Count   *int32 `json:"count"`
	}
	id, timeout, ok := sandboxTimeout(w, r, c, &body, &body.Timeout)
	if !ok {
		return
	}
	count := 1
	if body.Count != nil {
		count = int(*body.Count)
	}
	switch { // sandbox_fork.go:75-93
	case count < 1:
		writeError(w, http.StatusBadRequest, "Count must be at least 1")
		return
	case count > 100:
		writeError(w, http.StatusBadRequest, "Count cannot be greater than 100")
		return
	case count >= c.limits.Concurrency:
		// The parent holds a slot: that many forks could never all start.
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Count must be lower than the maximum number of concurrent sandboxes (%d)", c.limits.Concurrency))
		return
	}
	s.Mu.Lock()
	defer s.Mu.Unlock()
	now := s.Now()
	parent := s.reachableLocked(w, c, id, now)
	switch {
	case parent == nil:
		return
	case parent.state == StatePaused || parent.state == StateResuming:
		// sandbox_fork.go:188-200
		writeError(w, http.StatusConflict, fmt.Sprintf("Sandbox '%s' is paused and cannot be forked; resume it first", id))
		return
	case parent.state != StateRunning:
		// sandbox_fork.go:129-132
		writeError(w, http.StatusConflict, fmt.Sprintf("Sandbox '%s' cannot be forked while in '%s' state", id, parent.state))
		return
	}
	// The parent is checkpointed in place: it keeps running, its id and
	// its end, and now has a snapshot row (orchestrator/checkpoint_instance.
	// go:26-146, the row at :64): timed out later, it reads as paused.
	parent.takeSnapshot(now)
	parent.checkpoints++
	results := make([]forkResultJSON, 0, count)
	for range count {
		if !s.concurrencyLeftLocked(c, now) {
			results = append(results, forkResultJSON{Error: &errorJSON{Code: http.StatusTooManyRequests, Message: concurrencyMsg(c.limits.Concurrency)}})
			continue
		}
		rec := s.newRecordLocked(c.team, now)
		rec.template, rec.metadata, rec.autoPause, rec.forkOf = parent.template, simtest.CopyMap(parent.metadata), parent.autoPause, parent.id
		rec.state, rec.startedAt, rec.endAt = StateRunning, now, now.Add(timeout)
		rec.lost = c.d.lost
		sb := rec.sandbox()
		results = append(results, forkResultJSON{Sandbox: &sb})
	}
	if c.d.lost {
		dropConnection(w)
		return
	}
	writeJSON(w, http.StatusCreated, results)
}

// snapshot is POST /sandboxes/{sandboxID}/snapshots
// (handlers/snapshot_template_create.go:25-171): a named snapshot template
// of a running sandbox, which also writes the sandbox's own snapshot row
// (orchestrator/snapshot_template.go:76): timed out later without
// auto-pause, it reads as paused. A paused or gone one answers 404, one
// in another transition 409.
func (s *Server) snapshot(w http.ResponseWriter, r *http.Request, c *call) {
	var body struct {
		Name *string `json:"name"`
	}
	id, ok := sandboxBody(w, r, &body, false)
	if !ok {
		return
	}
	s.Mu.Lock()
	defer s.Mu.Unlock()
	now := s.Now()
	rec := s.lookupLocked(c.team, id, now)
	switch {
	case rec == nil || !rec.inStore():
		writeError(w, http.StatusNotFound, notFoundMsg(id))
		return
	case rec.state != StateRunning:
		writeError(w, http.StatusConflict, fmt.Sprintf("Sandbox '%s' cannot be snapshotted while in '%s' state", id, rec.state))
		return
	}
	rec.takeSnapshot(now)
	rec.namedSnapshots++
	s.seq++
	tmpl := fmt.Sprintf("snap%d", s.seq)
	out := struct {
		SnapshotID string   `json:"snapshotID"`
		Names      []string `json:"names"`
	}{SnapshotID: tmpl + ":default", Names: []string{}}
	if body.Name != nil && *body.Name != "" {
		out.SnapshotID = c.team + "/" + *body.Name + ":default"
		out.Names = []string{c.team + "/" + *body.Name}
	}
	writeJSON(w, http.StatusCreated, out)
}
