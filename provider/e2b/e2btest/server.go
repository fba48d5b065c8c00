// Package e2btest is a simulated E2B API for tests and demos, in the manner
// of net/http/httptest: NewServer starts it on a loopback port and s.URL is
// the API base URL to give to an E2B client (E2B_API_URL).
//
// It follows the calls tether makes as the real API server answers them
// (e2b-dev/infra, packages/api/internal at 54693ff3, the server the SDKs'
// spec/openapi.yml is synced from; each behaviour cites its file and line
// beside the code; paths below are relative to packages/api/internal):
// sandboxes belong to a team, which any of its keys (or an auth
// provider's bearer with X-Team-ID) acts for, and have no name, only the
// id the server assigns and the metadata the caller gives; another team's
// sandbox answers 404 like one that never existed; a blocked team still
// reads, lists and deletes; every sandbox has a timeout after which it is
// killed, or paused when created with autoPause; a pause, a fork's
// checkpoint of its parent and a named snapshot write a snapshot that only
// a DELETE removes, so a sandbox that had one reads as paused after its
// timeout killed it, and can be resumed; DELETE answers 204 and then 404,
// but a restore already in flight brings the sandbox back running
// (infra#3636); a fork boots count sandboxes that carry their parent's
// metadata, each result a sandbox or the error that kept that fork from
// starting; a create is in no store until the node answers (GET and
// DELETE answer 404, the list omits it); the list (GET /v2/sandboxes)
// filters by metadata and state and pages by an X-Next-Token header; a
// team's concurrency limit answers 429 on create; routes can be rate
// limited per team with RateLimit-* and Retry-After headers. Latency, 5xx,
// 429, lost answers, failed kills and slow restores can be switched on per
// test, with a seed so that a run can be repeated.
//
// Lifetimes follow a clock that tests can replace (WithClock, ManualClock,
// ScaledClock), and are computed lazily whenever the server is asked, so
// no goroutine moves a sandbox behind a test's back. Sandboxes returns the
// fate of every sandbox ever made, killed ones included: tests judge by it.
//
// The simulator knows nothing of tether.
package e2btest

import (
	crand "crypto/rand"
	"sync"
	"time"

	"github.com/tether-run/tether/provider/internal/simtest"
)

// Default key and team every new server accepts. Keys carry the e2b_
// prefix the real server requires (packages/auth/pkg/auth/internal/
// service/service.go:99-106).
const (
	DefaultKey  = "e2b_0123456789abcdef0123456789abcdef01234567"
	DefaultTeam = "team-1"
)

// Default limits of a team. The real ones come with the team's tier.
const (
	// DefaultMaxLengthHours bounds a sandbox's timeout and its whole life
	// (handlers/timeout_helper.go:30-35, orchestrator/keep_alive.go:28-33).
	DefaultMaxLengthHours = 1
	// DefaultConcurrency is how many sandboxes a team may run at once
	// (orchestrator/create_instance.go:188-204).
	DefaultConcurrency = 20
)

// ServerDefaultTimeout is the timeout of a sandbox created without one
// (sandbox/sandboxtypes/states.go:102, handlers/timeout_helper.go:19). The
// SDKs send their own default, 300 s (js-sdk connectionConfig.ts:9).
const ServerDefaultTimeout = 15 * time.Second

// Default timings of the simulated node. They are short so that tests run
// fast; options set realistic ones.
const (
	// DefaultCreateDelay is how long a create waits for its node, in real time.
	DefaultCreateDelay = 2 * time.Millisecond
	// DefaultPauseDelay is how long a pause request takes, in real time.
	DefaultPauseDelay = 2 * time.Millisecond
	// DefaultKillDelay is how long a kill request takes, in real time.
	DefaultKillDelay = 0
)

// Limits of a team.
type Limits struct {
	MaxLengthHours int
	Concurrency    int
}

// Server is a simulated E2B API. Besides its own methods it has those
// every simulator has alike (simtest.Base): Sandboxes and Sandbox (the
// fate of every sandbox it made), Calls and CallsFor (the requests it
// counted), RemoveKey, SetFaults, Inject and FailNext (faults), Handler
// and Close.
type Server struct {
	// URL is the API base URL, e.g. http://127.0.0.1:41234. Empty for a
	// server made with NewUnstartedServer until Start.
	URL string

	// base: the host, the lock (Mu), the clock (Now), the API keys (Keys:
	// key → team), the sandboxes (Store), the calls by route and by
	// sandbox id in the path (Counted), the faults and the scripted
	// answers; and the methods every simulator has.
	*base

	teams   map[string]Limits
	blocked map[string]string // team → reason
	// bearers maps an auth provider's token to the teams its user is a
	// member of (Authorization: Bearer with X-Team-ID).
	bearers map[string][]string
	seq     uint64

	limits  map[string]RateLimit // by route pattern
	buckets map[string]*bucket   // by team + route pattern

	createDelay, pauseDelay, killDelay time.Duration
	createGate                         chan struct{} // non-nil: creates wait for it to close
	killGate                           chan struct{} // non-nil: kills wait for it to close
	pauseGate                          chan struct{} // non-nil: pauses wait for it to close
	restoreGate                        chan struct{} // non-nil: restores wait for it to close
}

// base is the simulators' shared base, as E2B's.
type base = simtest.Base[*record, Sandbox, Faults, Scripted]

// Option configures a Server.
type Option func(*Server)

// WithCreateDelay sets how long a create waits for its node (real time).
func WithCreateDelay(d time.Duration) Option { return func(s *Server) { s.createDelay = d } }

// WithPauseDelay sets how long a pause request takes (real time).
func WithPauseDelay(d time.Duration) Option { return func(s *Server) { s.pauseDelay = d } }

// WithKillDelay sets how long a kill request takes (real time); meanwhile
// the sandbox is `killing`.
func WithKillDelay(d time.Duration) Option { return func(s *Server) { s.killDelay = d } }

// WithClock replaces the clock timeouts follow (time.Now by default), so a
// test can move time by hand (ManualClock) or speed it up (ScaledClock).
// Latency and the create, pause and kill delays still pass in real time.
func WithClock(now func() time.Time) Option { return func(s *Server) { s.Now = now } }

// WithFaults switches faults on from the start.
func WithFaults(f Faults) Option { return func(s *Server) { s.SetFaults(f) } }

// WithRateLimit limits a route of every team, as SetRateLimit.
func WithRateLimit(route string, l RateLimit) Option {
	return func(s *Server) { s.limits[route] = l }
}

// NewServer starts a simulated E2B API on a loopback port.
func NewServer(opts ...Option) *Server {
	s := NewUnstartedServer(opts...)
	s.Start()
	return s
}

// NewUnstartedServer returns a server that does not listen; use Handler to
// serve it yourself, or Start.
func NewUnstartedServer(opts ...Option) *Server {
	s := &Server{
		base:        simtest.NewBase[*record, Sandbox](map[string]string{DefaultKey: DefaultTeam}, faultRules),
		teams:       map[string]Limits{DefaultTeam: {MaxLengthHours: DefaultMaxLengthHours, Concurrency: DefaultConcurrency}},
		blocked:     map[string]string{},
		bearers:     map[string][]string{},
		limits:      map[string]RateLimit{},
		buckets:     map[string]*bucket{},
		createDelay: DefaultCreateDelay,
		pauseDelay:  DefaultPauseDelay,
		killDelay:   DefaultKillDelay,
	}
	for _, o := range opts {
		o(s)
	}
	s.Host = simtest.NewHost(s.routes())
	return s
}

// Start serves the API on a loopback port and sets URL. Handler is the
// API to serve yourself.
func (s *Server) Start() { s.URL = s.Host.Start() }

// Close releases every waiting request and stops the server.
func (s *Server) Close() {
	s.ReleaseCreates()
	s.ReleaseKills()
	s.ReleasePauses()
	s.ReleaseRestores()
	s.Host.Close()
}

// AddTeam creates a team with these limits (zero fields: the defaults),
// or changes an existing team's.
func (s *Server) AddTeam(team string, l Limits) {
	if l.MaxLengthHours == 0 {
		l.MaxLengthHours = DefaultMaxLengthHours
	}
	if l.Concurrency == 0 {
		l.Concurrency = DefaultConcurrency
	}
	s.Mu.Lock()
	defer s.Mu.Unlock()
	s.teams[team] = l
}

// AddKey lets key act in team, which is created with the default limits if
// it does not exist.
func (s *Server) AddKey(key, team string) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	s.Keys[key] = team
	if _, ok := s.teams[team]; !ok {
		s.teams[team] = Limits{MaxLengthHours: DefaultMaxLengthHours, Concurrency: DefaultConcurrency}
	}
}

// AddBearer lets an auth provider's token act, with X-Team-ID, in each of
// teams (its user is a member of them): the spec's AuthProviderBearerAuth
// with AuthProviderTeamAuth, accepted on every sandbox route beside
// X-API-Key (spec/openapi.yml:10-42, e.g. :2361-2366;
// packages/auth/pkg/auth/internal/service/service.go:174-258). The SDKs
// send it only as extra headers (apiHeaders), next to their X-API-Key,
// which the server tries first.
func (s *Server) AddBearer(token string, teams ...string) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	s.bearers[token] = append(s.bearers[token], teams...)
	for _, team := range teams {
		if _, ok := s.teams[team]; !ok {
			s.teams[team] = Limits{MaxLengthHours: DefaultMaxLengthHours, Concurrency: DefaultConcurrency}
		}
	}
}

// BlockTeam blocks a team, as its billing does: its keys still
// authenticate, and the routes of the server's allowlist still answer
// (every read, the list, and DELETE of a sandbox:
// packages/api/internal/middleware/blocked_team.go:14-47); every other
// answers 403 "team is blocked: <reason>", or "team is blocked" without a
// reason (packages/auth/pkg/auth/internal/team/state.go:28-39). An empty
// reason unblocks nothing; UnblockTeam does.
func (s *Server) BlockTeam(team, reason string) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	s.blocked[team] = reason
}

// UnblockTeam lifts BlockTeam.
func (s *Server) UnblockTeam(team string) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	delete(s.blocked, team)
}

// HoldCreates makes every create wait, reserved but in no store, until
// ReleaseCreates: the window in which a create is in flight.
func (s *Server) HoldCreates() {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	hold(&s.createGate)
}

// ReleaseCreates lets the held creates go on.
func (s *Server) ReleaseCreates() {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	release(&s.createGate)
}

// HoldKills makes every kill of a running sandbox wait, `killing`,
// until ReleaseKills: the window in which a kill is in progress.
func (s *Server) HoldKills() {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	hold(&s.killGate)
}

// ReleaseKills lets the held kills go on.
func (s *Server) ReleaseKills() {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	release(&s.killGate)
}

// HoldPauses makes every pause request wait, `pausing`, until
// ReleasePauses: the window in which a pause is in progress.
func (s *Server) HoldPauses() {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	hold(&s.pauseGate)
}

// ReleasePauses lets the held pauses go on.
func (s *Server) ReleasePauses() {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	release(&s.pauseGate)
}

// HoldRestores makes every restore of a paused sandbox (a resume, or a
// connect that resumes) wait, StateResuming, until ReleaseRestores: the
// window of the kill/resume race (see Faults.RateResumeRace), on demand.
func (s *Server) HoldRestores() {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	hold(&s.restoreGate)
}

// ReleaseRestores lets the held restores go on.
func (s *Server) ReleaseRestores() {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	release(&s.restoreGate)
}

// hold makes a gate, if there is none, that requests of its kind wait on.
func hold(gate *chan struct{}) {
	if *gate == nil {
		*gate = make(chan struct{})
	}
}

// release lets the requests waiting on a gate go on, and removes it.
func release(gate *chan struct{}) {
	if *gate != nil {
		close(*gate)
		*gate = nil
	}
}

// States of a simulated sandbox, as Sandbox.State shows them. The API
// itself shows only running and paused (pausing reads as paused; creating
// and killing as not found; killed is not found; resuming as paused while
// its snapshot is there, else not found).
const (
	StateCreating = "creating" // reserved, waiting for the node: in no store
	StateRunning  = "running"
	StatePausing  = "pausing"
	StatePaused   = "paused"
	// StateResuming: restored from its snapshot by a resume or connect,
	// reserved and in no store until the node answers
	// (orchestrator/create_instance.go:172-505, Add at :473).
	StateResuming = "resuming"
	StateKilling  = "killing"
	StateKilled   = "killed"
)

// KilledByAPI prefixes Sandbox.KilledBy for a DELETE, followed by the
// caller's User-Agent: "DELETE from tether" is tether's drain, replay or
// sweep.
const KilledByAPI = simtest.DeletedByAPI

// Kill reasons (sandbox/sandboxtypes/states.go:51-58).
const (
	KillRequest = "request" // DELETE /sandboxes/{id}
	KillTimeout = "timeout" // its timeout passed without auto-pause
)

// Sandbox is the simulator's view of one sandbox, for test assertions.
type Sandbox struct {
	ID, Team, TemplateID string
	Metadata             map[string]string
	State                string
	AutoPause            bool
	// StartedAt is the start of the current run (a resume starts a new one);
	// EndAt is when a running sandbox's timeout ends, or when a paused one
	// was paused.
	StartedAt, EndAt time.Time
	CreatedAt        time.Time
	// Snapshot: a snapshot of the sandbox exists (it costs storage until a
	// DELETE removes it), written by a pause, a fork's checkpoint of it or
	// a named snapshot, at SnapshotAt. A sandbox that has one is paused,
	// not killed, when its timeout kills it (Evictions counts those).
	Snapshot   bool
	SnapshotAt time.Time
	// Evictions counts the times its timeout killed it while its snapshot
	// stayed, so that it read as paused again; Checkpoints the forks made
	// of it, each a snapshot of it; NamedSnapshots its POST /snapshots.
	Evictions, Checkpoints, NamedSnapshots int
	// Revived counts the times a restore in flight brought it back running
	// after a DELETE had answered 204 (infra#3636; Faults.RateResumeRace).
	Revived int
	// KilledAt and KillReason tell how a killed sandbox ended.
	KilledAt   time.Time
	KillReason string
	// KilledBy says what killed it: KilledByAPI and the caller's
	// User-Agent for a DELETE (tether's is "tether"), as Daytona's
	// simulator says who deleted a sandbox; empty for a timeout (see
	// KillReason).
	KilledBy string
	// Orphaned: a kill failed on the node after the sandbox had left the
	// store (Faults.RateKillFail); the node's own sync kills it later.
	Orphaned bool
	// Pauses and Resumes count its pauses (auto-pauses included) and resumes.
	Pauses, Resumes int
	// ForkOf is the parent's id, for a fork.
	ForkOf string
	// Lost: the answer of the create or fork that made it was lost
	// (Faults.RateCreateLost, RateForkLost), so the caller never learned
	// this id.
	Lost bool
}

// Live counts the sandboxes that still cost something: running, pausing,
// paused (a snapshot), killing, or in flight.
func (s *Server) Live() int {
	n := 0
	for _, sb := range s.Sandboxes() {
		if sb.State != StateKilled {
			n++
		}
	}
	return n
}

// SeedSandbox describes a sandbox planted by AddSandbox.
type SeedSandbox struct {
	Metadata   map[string]string
	TemplateID string        // empty: "base"
	Timeout    time.Duration // zero: ServerDefaultTimeout
	AutoPause  bool
	// Paused plants it paused (with a snapshot).
	Paused bool
}

// AddSandbox plants a running (or paused) sandbox in team without an API
// call, e.g. another team's sandbox, or a foreign one of the same team.
func (s *Server) AddSandbox(team string, seed SeedSandbox) Sandbox {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	now := s.Now()
	r := s.newRecordLocked(team, now)
	r.template = seed.TemplateID
	if r.template == "" {
		r.template = "base"
	}
	r.metadata = simtest.CopyMap(seed.Metadata)
	r.autoPause = seed.AutoPause
	t := seed.Timeout
	if t == 0 {
		t = ServerDefaultTimeout
	}
	r.state = StateRunning
	r.startedAt, r.endAt = now, now.Add(t)
	if seed.Paused {
		r.pauses = 1
		r.takeSnapshot(now)
		r.state, r.endAt = StatePaused, now
	}
	return r.Export()
}

// Expire ends a running sandbox's timeout now, as if it had passed: it is
// killed, or paused if it was created with autoPause.
func (s *Server) Expire(id string) bool {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	now := s.Now()
	r, ok := s.Store.At(id, now)
	if !ok || r.state != StateRunning {
		return false
	}
	r.endAt = now
	r.Advance(now)
	return true
}

func (s *Server) newRecordLocked(team string, now time.Time) *record {
	s.seq++
	r := &record{id: newID(), team: team, state: StateCreating, createdAt: now, seq: s.seq, metadata: map[string]string{}}
	s.Store.Add(r.id, r)
	return r
}

// teamRecordsLocked returns the records of team, advanced to now, in
// creation order.
func (s *Server) teamRecordsLocked(team string, now time.Time) []*record {
	return s.Store.Where(now, func(r *record) bool { return r.team == team })
}

// lookupLocked finds the team's sandbox with this id, advanced to now.
// Another team's sandbox is not found: every store lookup of the real
// server is scoped by team (orchestrator/keep_alive.go:47,
// handlers/sandbox_get.go:126-131, 194-199).
func (s *Server) lookupLocked(team, id string, now time.Time) *record {
	r, ok := s.Store.Get(id)
	if !ok || r.team != team {
		return nil
	}
	r.Advance(now)
	return r
}

// idAlphabet is the real server's (packages/shared/pkg/id/id.go:16, 28-30):
// ids are "i" and 20 lower-case letters and digits
// (handlers/sandbox_create.go:129).
const idAlphabet = "abcdefghijklmnopqrstuvwxyz1234567890"

// newID does not use the fault seed, so that reseeding faults mid-test
// cannot repeat an id.
func newID() string {
	var b [20]byte
	_, _ = crand.Read(b[:]) // never fails on supported platforms
	out := make([]byte, 0, 21)
	out = append(out, 'i')
	for _, c := range b {
		out = append(out, idAlphabet[int(c)%len(idAlphabet)])
	}
	return string(out)
}

// ManualClock is a clock a test moves by hand. Its zero value starts at
// the time of its first reading.
type ManualClock struct {
	mu sync.Mutex
	t  time.Time
}

// NewManualClock returns a clock that reads t until moved.
func NewManualClock(t time.Time) *ManualClock { return &ManualClock{t: t} }

// Now reads the clock.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.t.IsZero() {
		c.t = time.Now()
	}
	return c.t
}

// Advance moves the clock forward by d.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.t.IsZero() {
		c.t = time.Now()
	}
	c.t = c.t.Add(d)
}

// ScaledClock returns a clock that runs factor times faster than the wall
// clock from now on: with 60, a 300 s timeout ends after 5 real seconds.
func ScaledClock(factor float64) func() time.Time {
	start := time.Now()
	return func() time.Time {
		return start.Add(time.Duration(float64(time.Since(start)) * factor))
	}
}
