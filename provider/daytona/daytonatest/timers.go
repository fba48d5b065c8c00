package daytonatest

import (
	"net/http"
	"time"
)

// Daytona's lifecycle timers, as the real server runs them at v0.190.0
// (apps/api/src/sandbox/managers/sandbox.manager.ts,
// apps/api/src/sandbox/services/sandbox-activity.service.ts,
// apps/api/src/sandbox/repositories/sandbox.repository.ts). They run only
// on a server made WithMinute; without it no sandbox ever stops or is
// deleted by itself, as before.
//
//   - Last activity is a sandbox's create time, then the time of each of
//     its state changes (sandbox.repository.ts:48, 119-122, 176-179), then
//     each POST /sandbox/{id}/last-activity (sandbox.controller.ts:915-935).
//     That call is what Daytona's own proxy makes for toolbox and preview
//     traffic (apps/proxy/pkg/proxy/get_sandbox_target.go:355), its SSH
//     gateway for a live session (apps/ssh-gateway/main.go:372, 384) and the
//     deprecated toolbox routes (toolbox.deprecated.service.ts:110); Touch
//     models those. Nothing that runs inside a sandbox counts.
//   - The call is throttled per sandbox: one within 5 s of the last one
//     taken is answered 201 and does nothing (sandbox-activity.service.ts:
//     41-51, SANDBOX_ACTIVITY_THROTTLE_TTL_SECONDS, default 5 in
//     config/configuration.ts:341). A taken one is buffered in Redis and
//     reaches the database at the next flush, every 10 s (:75-112): until
//     then the checks below (and GET) do not see it.
//   - Every 10 s (sandbox.manager.ts:97, 233) a started sandbox whose
//     desired state is started, not pending, with an auto-stop interval
//     other than 0 and a last activity older than interval x 1 minute is
//     stopped (:115-148): an ephemeral one (auto-delete 0) is deleted at once
//     instead (:143-144). A stopped one (desired stopped, not pending) with
//     an auto-delete interval >= 0 and a last activity older than interval x
//     1 minute is deleted (:250-277): 0 means at the first check after it
//     stopped (its stop was its last activity), -1 never. Each run takes
//     at most 100 sandboxes per runner node (:130, :265); the rest wait for
//     the next run.
//   - Every 10 s too, a stopped one (desired stopped, not pending) with a
//     last activity older than its auto-archive interval x 1 minute is
//     archived (:173-231: desired archived, then the archive action moves
//     it through archiving to archived), at most 100 a run (:198). When
//     the auto-delete and the auto-archive fall due at the same check, the
//     delete is taken here (the real jobs race). An archived sandbox is
//     never auto-deleted: that check takes only stopped ones (:257-260),
//     so it stays until someone deletes it.
//
// Everything is computed lazily, like the state changes: when the server is
// asked, the timers that would have fired since are applied at the moment
// they would have fired, so the record's times do not depend on when a test
// looks.

// checkBatch is how many sandboxes one run of a check takes per runner
// node (sandbox.manager.ts:130, 265: .limit(100)); the simulator is one
// node. The others wait for the next run.
const checkBatch = 100

// Periods of the real server, in seconds of a 60-second minute.
const (
	checkSeconds    = 10 // auto-stop and auto-delete checks
	flushSeconds    = 10 // last activity, from Redis to the database
	throttleSeconds = 5  // one last-activity update per sandbox
)

// WithMinute turns the lifecycle timers on, with a simulated minute of d:
// an auto-stop interval of n stops a sandbox n*d after its last activity,
// and the server's own periods (checks and flushes every 10 s, the 5 s
// throttle of the last-activity call) shrink by the same factor. Use
// time.Minute for the real server's pace. Latency, hangs and Retry-After
// are not scaled.
func WithMinute(d time.Duration) Option { return func(s *Server) { s.minute = d } }

// TimerEvent is one firing of a lifecycle timer, for tests.
type TimerEvent struct {
	ID   string
	Kind string // TimerAutoStop, TimerAutoDelete or TimerAutoArchive
	// At is when the check that fired ran (simulated clock).
	At time.Time
	// LastActivity is the last activity the check saw.
	LastActivity time.Time
}

// Kinds of TimerEvent.
const (
	TimerAutoStop    = "auto-stop"
	TimerAutoDelete  = "auto-delete"
	TimerAutoArchive = "auto-archive"
)

// TimerEvents returns every timer that has fired, in order, on every
// sandbox (advanced to now first).
func (s *Server) TimerEvents() []TimerEvent {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	now := s.Now()
	for r := range s.Store.All() {
		r.Advance(now)
	}
	return append([]TimerEvent(nil), s.timerLog...)
}

// firedKey names one run of one check.
type firedKey struct {
	kind string
	at   int64
}

// lease is a record's part of the timers.
type lease struct {
	// buffered is the last activity taken but not flushed yet (zero: none).
	buffered time.Time
	// throttledUntil: last-activity calls before then do nothing.
	throttledUntil time.Time
	// checkedUntil is the time up to which the timers were applied: a check
	// at or before it already ran on the record as it was then.
	checkedUntil time.Time
}

// scaled is secs seconds of a simulated minute.
func (s *Server) scaled(secs int) time.Duration {
	return s.minute * time.Duration(secs) / 60
}

// tickAfter is the first run of a periodic job strictly after t (the jobs
// run at multiples of their period, as cron does).
func tickAfter(t time.Time, period time.Duration) time.Time {
	return t.Truncate(period).Add(period)
}

// nextTimer is the earliest timer of r due by now, and what it does; fire
// is nil when none is.
func (s *Server) nextTimer(r *record, now time.Time) (time.Time, func()) {
	if s.minute <= 0 {
		return time.Time{}, nil
	}
	var at time.Time
	var fire func()
	consider := func(t time.Time, f func()) {
		if t.After(now) || (fire != nil && !t.Before(at)) {
			return
		}
		at, fire = t, f
	}
	check := s.scaled(checkSeconds)
	due := func(kind string, interval int) time.Time {
		deadline := r.lastActivityAt.Add(time.Duration(interval) * s.minute)
		t := tickAfter(later(deadline, r.checkedUntil), check)
		for s.fired[firedKey{kind, t.UnixNano()}] >= checkBatch {
			t = t.Add(check)
		}
		return t
	}
	logFire := func(kind string, t time.Time) {
		s.timerLog = append(s.timerLog, TimerEvent{ID: r.id, Kind: kind, At: t, LastActivity: r.lastActivityAt})
		if s.fired == nil {
			s.fired = map[firedKey]int{}
		}
		s.fired[firedKey{kind, t.UnixNano()}]++
		r.checkedUntil = t
	}
	active := !r.held && !r.pending && !r.erroredDeleted() && !r.deleteRequested
	switch {
	case active && r.state == stateStarted && r.desiredState == stateStarted && r.autoStop != 0:
		t := due(TimerAutoStop, r.autoStop)
		consider(t, func() {
			logFire(TimerAutoStop, t)
			if r.autoDelete == 0 {
				r.deleteBy(DeletedByAutoStop)
				r.beginDestroy(t, s.destroyLag)
				return
			}
			s.transition(r, t, stateStopping)
			r.pending = true
		})
	case active && r.state == stateStopped && r.desiredState == stateStopped:
		if r.autoDelete >= 0 {
			t := due(TimerAutoDelete, r.autoDelete)
			consider(t, func() {
				logFire(TimerAutoDelete, t)
				r.deleteBy(DeletedByAutoDelete)
				r.beginDestroy(t, s.destroyLag)
			})
		}
		ta := due(TimerAutoArchive, r.autoArchive)
		consider(ta, func() {
			logFire(TimerAutoArchive, ta)
			s.transition(r, ta, stateArchiving)
		})
	}
	// A flush at the instant of a check comes after it: the worse case
	// for a renewal (the real jobs' order at one instant is not fixed).
	if !r.buffered.IsZero() {
		t := tickAfter(r.buffered.Add(-time.Nanosecond), s.scaled(flushSeconds))
		consider(t, func() {
			// The upsert takes only a newer time (sandbox-activity.service.ts:129-143).
			if r.buffered.After(r.lastActivityAt) {
				r.lastActivityAt = r.buffered
				r.record(t)
			}
			r.buffered = time.Time{}
		})
	}
	return at, fire
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// stateChanged is the real server's upsert of the last activity on every
// state change (sandbox.repository.ts:119-122); with the timers only.
func (r *record) stateChanged(at time.Time) {
	if r.srv.minute > 0 {
		r.lastActivityAt = at
	}
}

// noteActivity is one last-activity update at now: throttled and buffered
// with the timers on, else seen at once.
func (r *record) noteActivity(now time.Time) {
	s := r.srv
	if s.minute <= 0 {
		r.lastActivityAt = now
		r.record(now)
		return
	}
	if now.Before(r.throttledUntil) {
		return
	}
	r.throttledUntil = now.Add(s.scaled(throttleSeconds))
	r.buffered = now
}

// destroyedKept is how long the real server keeps the row of a destroyed
// sandbox: a job every second deletes those destroyed more than 24 hours
// ago (sandbox.service.ts:2852-2877).
const destroyedKept = 24 * time.Hour

// lastActivity serves POST /sandbox/{id}/last-activity: 201 with no body
// (sandbox.controller.ts:915-935; no permission is required, and it counts
// against the `authenticated` throttler like every route that does not opt
// out, :43).
//
// It does not ask whether the sandbox lives. The access guard only looks up
// the row's organization, by id and then by name, in any state
// (sandbox-access.guard.ts:53-61, sandbox.service.ts:1810-1842), and the
// handler buffers the time without a lookup (sandbox-activity.service.ts:
// 41-51). So a destroyed sandbox, or one deleted in an errored state,
// answers 201 until its row is removed, 24 h after it was destroyed; only
// then 404. A call by name answers 201 too, but nothing reads it: the
// flush keys activity by sandbox id, and a name is skipped as a missing
// sandbox (:150-172).
func (s *Server) lastActivity(w http.ResponseWriter, r *http.Request) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	now := s.Now()
	org, idOrName := orgOf(r), r.PathValue("idOrName")
	kept := func(rec *record) bool {
		rec.Advance(now)
		return rec.org == org && (rec.state != stateDestroyed || now.Sub(rec.updatedAt) <= destroyedKept)
	}
	if rec, ok := s.Store.Get(idOrName); ok && kept(rec) {
		if rec.state != stateDestroyed && !rec.erroredDeleted() {
			rec.noteActivity(now)
		}
		w.WriteHeader(http.StatusCreated)
		return
	}
	for rec := range s.Store.All() {
		if rec.name == idOrName && kept(rec) {
			w.WriteHeader(http.StatusCreated)
			return
		}
	}
	writeError(w, r, http.StatusNotFound, "Sandbox with ID or name "+idOrName+" not found")
}
