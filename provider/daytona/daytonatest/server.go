// Package daytonatest is a simulated Daytona API for tests and demos, in the
// manner of net/http/httptest: NewServer starts it on a loopback port and
// s.URL is the API base URL (ending in /api) to give to a Daytona client.
//
// It follows the official OpenAPI spec (the one shipped with
// github.com/daytonaio/daytona/libs/api-client-go) and, where the spec is
// silent or wrong, the real server at the same version (daytonaio/daytona
// v0.190.0, apps/api/src; each behaviour cites its file and line beside
// the code): sandboxes are per organization, names are unique within one,
// state changes take time (creating → started, stopping → stopped,
// destroying → destroyed); a delete renames the sandbox at once to
// DESTROYED_<name>_<unixms> while its state lags until the destroy action
// runs, and a second delete meanwhile answers 409; an errored sandbox's
// delete answers 404 at once after; stop of a stopped, archived or errored
// sandbox answers 400; a delete with live forks 400; a create can answer
// 400 although its sandbox exists; setters answer 201; forks (VM classes
// only) and archives follow the server's rules; last-activity answers 201
// for a destroyed sandbox for 24 h; the list is
// cursor-paged, sorted by last activity and eventually consistent; quotas
// are per organization and throttler, with their own headers, and API keys
// can lack permissions. Faults (latency, 5xx, 429, 403 and 404 hiccups,
// setter conflicts, hung requests, lost answers, failed starts, stuck or
// lagging states, list lag) can be switched on per test, with a seed so
// that a run can be repeated.
//
// A create is answered once the sandbox has started (or after 30 s), but
// with the sandbox as it was inserted, state creating
// (sandbox.controller.ts:300-311). Which answers of POST /sandbox come
// before anything is stored, so that the sandbox surely does not exist
// (sandbox.controller.ts:277-311, sandbox.service.ts:460-720 at v0.190.0):
//
//   - 401, 403 and 429: the guards and throttlers run before the handler;
//     a suspended organization (organization.service.ts:875-885) and a
//     region without quota for the class (sandbox.service.ts:196-206) are
//     403 too;
//   - 400 for a body the validation pipe refuses, for resources, a GPU
//     type or a snapshot given where they may not be (controller :282-300),
//     an unknown, unavailable or inactive snapshot (:476-515), a GPU
//     sandbox that is not ephemeral (:524-526), an Android sandbox without
//     a link and a bad link (:528-538), per-sandbox and total quotas
//     (:212-300), volumes (:570), no runner for it (runner.service.ts),
//     negative intervals and bad network lists (:650-670); 404 for an
//     unknown region or linked sandbox (:2810-2833);
//   - 409 "Sandbox with name N already exists": the unique index refuses
//     the insert, in a transaction with its last-activity row
//     (sandbox.repository.ts:34-62; sandbox.service.ts:683, 711-713). A
//     warm-pool sandbox handed out under a taken name is refused the same
//     way (:762-846, 409).
//
// After the store, so that the sandbox may exist: 400 "Sandbox failed to
// start: ..." (the sandbox stays, in state error: sandbox.controller.ts:
// 1547-1551); any answer the caller did not get (a hang-up or timeout
// ends nothing on the server); and a 5xx, which may come from the insert
// (nothing stored), from building the answer after it (:697), or from a
// gateway in front. The simulator gives the 409, the GPU and interval
// 400s, the auth and throttler answers before storing anything, and the
// failed start after.
//
// State changes are computed lazily from the wall clock whenever the server
// is asked, so no goroutine moves a sandbox behind a test's back: a test that
// must hold a sandbox in a state uses Hold and Release.
//
// The simulator knows nothing of tether.
package daytonatest

import (
	crand "crypto/rand"
	"fmt"
	"time"

	"github.com/tether-run/tether/provider/internal/simtest"
)

// Default key and organization every new server accepts.
const (
	DefaultKey = "test-key"
	DefaultOrg = "org-1"
)

// Default timings. They are short so that tests run fast; `tether demo` and
// benchmarks set realistic ones with the options below.
const (
	// DefaultCreateDelay is how long a new sandbox stays `creating`.
	DefaultCreateDelay = 5 * time.Millisecond
	// DefaultStopDelay is how long a stop stays `stopping` (and a start `starting`).
	DefaultStopDelay = 5 * time.Millisecond
	// DefaultDestroyDelay is how long a deleted sandbox stays `destroying`.
	DefaultDestroyDelay = 5 * time.Millisecond
	// DefaultCreateWait is how long POST /sandbox waits for the new sandbox to
	// be started before it answers anyway: the real server waits 30 s.
	DefaultCreateWait = 30 * time.Second
)

// Server is a simulated Daytona API. Besides its own methods it has those
// every simulator has alike (simtest.Base): Sandboxes and Sandbox (the
// fate of every sandbox it made), Calls and CallsFor (the requests it
// counted), RemoveKey, SetFaults, Inject and FailNext (faults), Handler
// and Close.
type Server struct {
	// URL is the API base URL, e.g. http://127.0.0.1:41234/api. Empty for a
	// server made with NewUnstartedServer until Start.
	URL string

	// base: the host, the lock (Mu), the clock (Now), the API keys (Keys:
	// key → organization), the sandboxes across organizations (Store), the
	// calls by route and by {idOrName} in the path (Counted), the faults
	// and the scripted answers; and the methods every simulator has.
	*base

	perms map[string][]string // API key → its permissions; none listed: all
	jwts  map[string][]string // JWT → organizations it may act in
	seq   uint64              // tie-break for equal creation times

	snapshotClass map[string]string // snapshot → sandbox class; absent: container

	createDelay, stopDelay, destroyDelay, createWait time.Duration
	destroyLag                                       time.Duration

	// minute is the length of a simulated minute with WithMinute; zero:
	// no lifecycle timer runs (timers.go).
	minute   time.Duration
	timerLog []TimerEvent
	fired    map[firedKey]int // by check run: how many it took

	quotas     map[string]Quota   // by throttler
	failedAuth Quota              // per client address
	windows    map[string]*window // by throttleKey
	announced  map[string]time.Time
	refused    map[string]int // by throttler
	inWindow   map[string]int // by throttler
}

// base is the simulators' shared base, as Daytona's.
type base = simtest.Base[*record, Sandbox, Faults, Scripted]

// Option configures a Server.
type Option func(*Server)

// WithCreateDelay sets how long a new (or restarted) sandbox stays `creating` (`starting`).
func WithCreateDelay(d time.Duration) Option { return func(s *Server) { s.createDelay = d } }

// WithStopDelay sets how long a stop stays `stopping`.
func WithStopDelay(d time.Duration) Option { return func(s *Server) { s.stopDelay = d } }

// WithDestroyDelay sets how long a deleted sandbox stays `destroying`.
func WithDestroyDelay(d time.Duration) Option { return func(s *Server) { s.destroyDelay = d } }

// WithDestroyLag sets how long after an accepted DELETE the destroy action
// runs: until then GET shows the sandbox renamed but in its old state
// (started, stopped, archived, paused, ...). Faults.DestroyLag adds a
// seeded share on top. The real server usually takes well under a second,
// up to about 10 s under contention, and longer while the sandbox's runner
// does not answer (sandbox-destroy.action.ts:39-42).
func WithDestroyLag(d time.Duration) Option { return func(s *Server) { s.destroyLag = d } }

// WithCreateWait sets how long POST /sandbox waits for the sandbox to start
// before answering (the real server waits up to 30 s; 0 answers at once).
func WithCreateWait(d time.Duration) Option { return func(s *Server) { s.createWait = d } }

// WithListLag makes GET /sandbox show the world as it was d ago (the same
// as Faults.ListLag; a later SetFaults replaces it).
func WithListLag(d time.Duration) Option { return func(s *Server) { s.Faults.ListLag = d } }

// WithSnapshotClass makes sandboxes created from snapshot of class class
// (ClassLinuxVM, ClassWindows, ...): the real server takes a sandbox's
// class from its snapshot (sandbox.service.ts:635), and only VM classes can
// be forked (:1093-1095). Other snapshots make containers.
func WithSnapshotClass(snapshot, class string) Option {
	return func(s *Server) { s.snapshotClass[snapshot] = class }
}

// WithClock replaces the wall clock the simulated state changes follow,
// so a test can move time by hand. Latency, hangs and the create wait still
// pass in real time.
func WithClock(now func() time.Time) Option { return func(s *Server) { s.Now = now } }

// WithFaults switches faults on from the start.
func WithFaults(f Faults) Option { return func(s *Server) { s.SetFaults(f) } }

// NewServer starts a simulated Daytona API on a loopback port.
func NewServer(opts ...Option) *Server {
	s := NewUnstartedServer(opts...)
	s.Start()
	return s
}

// NewUnstartedServer returns a server that does not listen; use Handler to
// serve it yourself (as `tether demo` does), or Start.
func NewUnstartedServer(opts ...Option) *Server {
	s := &Server{
		base:          simtest.NewBase[*record, Sandbox](map[string]string{DefaultKey: DefaultOrg}, faultRules),
		perms:         map[string][]string{},
		quotas:        map[string]Quota{},
		windows:       map[string]*window{},
		announced:     map[string]time.Time{},
		refused:       map[string]int{},
		inWindow:      map[string]int{},
		jwts:          map[string][]string{},
		snapshotClass: map[string]string{},
		createDelay:   DefaultCreateDelay,
		stopDelay:     DefaultStopDelay,
		destroyDelay:  DefaultDestroyDelay,
		createWait:    DefaultCreateWait,
	}
	for _, o := range opts {
		o(s)
	}
	s.Host = simtest.NewHost(s.routes())
	return s
}

// Start serves the API on a loopback port and sets URL. Handler is the
// API to serve yourself (its paths start with /api); Close releases every
// hung request and stops the server.
func (s *Server) Start() { s.URL = s.Host.Start() + "/api" }

// AddKey lets key act in org. An org needs no other creation.
func (s *Server) AddKey(key, org string) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	s.Keys[key] = org
}

// Sandbox classes (SandboxClass in the spec).
const (
	ClassContainer = "container"
	ClassLinuxVM   = "linux-vm"
	ClassWindows   = "windows"
	ClassAndroid   = "android"
)

// Organization permissions an API key can carry
// (organization/enums/organization-resource-permission.enum.ts:19-20).
const (
	PermWriteSandboxes  = "write:sandboxes"
	PermDeleteSandboxes = "delete:sandboxes"
)

// AddKeyWithPermissions lets key act in org with only these permissions:
// a route that requires another one answers 403 "Access denied"
// (organization-auth-context.guard.ts:63-65, 194-206). Create, start, stop
// and the setters require write:sandboxes, DELETE delete:sandboxes
// (sandbox.controller.ts:244, 416, 504, 550, 958); reads require none.
func (s *Server) AddKeyWithPermissions(key, org string, perms ...string) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	s.Keys[key] = org
	s.perms[key] = append([]string{}, perms...)
}

// AddJWT lets a JWT act in the given organizations, chosen per request by
// the X-Daytona-Organization-ID header (as the real server does for JWTs).
func (s *Server) AddJWT(token string, orgs ...string) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	s.jwts[token] = append([]string(nil), orgs...)
}

// Sandbox is the simulator's view of one sandbox, for test assertions.
type Sandbox struct {
	ID, Org, Name        string
	State, DesiredState  string
	Labels               map[string]string
	AutoStopInterval     int
	AutoArchiveInterval  int
	AutoDeleteInterval   int
	CreatedAt, UpdatedAt time.Time
	LastActivityAt       time.Time
	// DeleteRequested is true once a DELETE (or an auto-delete) was accepted.
	DeleteRequested bool
	// Pending: a requested state change (a delete, a stop) has not reached
	// its desired state yet.
	Pending     bool
	ErrorReason string
	ForkOf      string // the parent's id, for a fork
	Class       string // sandboxClass: container, linux-vm or windows
	GPU         int
	// DeletedBy says what deleted it, the first time: DeletedByAPI and
	// the caller's User-Agent for a DELETE (tether's is "tether"), or the
	// DeletedBy* constant of a delete Daytona made itself. Empty while no
	// delete was accepted.
	DeletedBy string
}

// SeedSandbox describes a sandbox planted by AddSandbox.
type SeedSandbox struct {
	Name   string // empty: the id
	Labels map[string]string
	// State to start in; empty means started. Transitional states move on
	// as usual (creating → started, destroying → destroyed).
	State              string
	AutoStopInterval   *int // nil: the server default, 15
	AutoDeleteInterval *int // nil: the server default, -1 (disabled)
	// AutoArchiveInterval nil: the server default, 10080 (7 days).
	AutoArchiveInterval *int
	// ErrorReason goes with State "error".
	ErrorReason string
	// ForkOf makes the new sandbox a fork of this sandbox id: while it is not
	// deleted, deleting the parent answers 400.
	ForkOf string
	// Class is the sandbox class (ClassContainer when empty); only VM
	// classes can be forked.
	Class string
	// GPU > 0 makes a GPU sandbox: it cannot be forked and its auto-delete
	// interval cannot be set.
	GPU int
}

// AddSandbox plants a sandbox in org without an API call, e.g. a foreign one
// with the same name in another organization, or one with other labels.
// It fails if the name is taken in that organization.
func (s *Server) AddSandbox(org string, seed SeedSandbox) (Sandbox, error) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	now := s.Now()
	if seed.Name != "" && s.byNameLocked(org, seed.Name, now) != nil {
		return Sandbox{}, fmt.Errorf("daytonatest: sandbox with name %s already exists in %s", seed.Name, org)
	}
	r := s.newRecordLocked(org, now)
	if seed.Name != "" {
		r.name = seed.Name
	}
	r.labels = simtest.CopyMap(seed.Labels)
	if seed.AutoStopInterval != nil {
		r.autoStop = *seed.AutoStopInterval
	}
	if seed.AutoDeleteInterval != nil {
		r.autoDelete = *seed.AutoDeleteInterval
	}
	if seed.AutoArchiveInterval != nil {
		r.autoArchive = resolveAutoArchive(*seed.AutoArchiveInterval)
	}
	state := seed.State
	if state == "" {
		state = stateStarted
	}
	r.errorReason = seed.ErrorReason
	r.parent = seed.ForkOf
	if seed.Class != "" {
		r.class = seed.Class
	}
	r.gpu = seed.GPU
	r.state = state
	r.desiredState = desiredFor(state)
	r.record(now)
	s.scheduleNatural(r, now)
	return r.Export(), nil
}

// Hold puts a sandbox into state now (e.g. "starting" or "destroying") and
// keeps it there for d; afterwards it moves on as it naturally would
// (starting → started, destroying → destroyed, ...). d <= 0 holds it until
// Release. A sandbox held in `destroying` keeps its original name if it was
// not deleted: use it on a deleted sandbox to model Daytona issue #3294.
func (s *Server) Hold(id, state string, d time.Duration) error {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	r, now, err := s.recordLocked(id)
	if err != nil {
		return err
	}
	r.state = state
	r.steps = nil
	r.held = d <= 0
	r.updatedAt = now
	r.record(now)
	if d > 0 {
		s.scheduleNaturalAt(r, now.Add(d))
	}
	return nil
}

// Release ends a Hold: the sandbox moves on from its state now.
func (s *Server) Release(id string) error {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	r, now, err := s.recordLocked(id)
	if err != nil {
		return err
	}
	r.held = false
	s.scheduleNaturalAt(r, now)
	r.Advance(now)
	return nil
}

// recordLocked finds the sandbox id, advanced to now, for a test's call
// that names it.
func (s *Server) recordLocked(id string) (*record, time.Time, error) {
	now := s.Now()
	r, ok := s.Store.At(id, now)
	if !ok {
		return nil, now, fmt.Errorf("daytonatest: no sandbox %s", id)
	}
	return r, now, nil
}

// orgRecordsLocked returns the records of org, advanced to now, in creation order.
func (s *Server) orgRecordsLocked(org string, now time.Time) []*record {
	return s.Store.Where(now, func(r *record) bool { return r.org == org })
}

// byNameLocked finds the sandbox of org with this exact name that is not destroyed.
func (s *Server) byNameLocked(org, name string, now time.Time) *record {
	for _, r := range s.orgRecordsLocked(org, now) {
		if r.name == name && r.state != stateDestroyed {
			return r
		}
	}
	return nil
}

// lookupLocked resolves an id or a name the way the real server does: the id
// first, then the name, within one organization, never a destroyed one
// (sandbox.service.ts:1739-1775), and never one deleted in an errored
// state (:1777-1783).
func (s *Server) lookupLocked(org, idOrName string, now time.Time) *record {
	if r, ok := s.Store.Get(idOrName); ok && r.org == org {
		r.Advance(now)
		if r.state != stateDestroyed {
			if r.erroredDeleted() {
				return nil
			}
			return r
		}
	}
	r := s.byNameLocked(org, idOrName, now)
	if r != nil && r.erroredDeleted() {
		return nil
	}
	return r
}

func (s *Server) newRecordLocked(org string, now time.Time) *record {
	s.seq++
	id := newID()
	r := &record{view: view{
		id:           id,
		org:          org,
		name:         id,
		labels:       map[string]string{},
		env:          map[string]string{},
		target:       "us",
		snapshot:     "daytonaio/sandbox:latest",
		class:        ClassContainer,
		user:         "daytona",
		cpu:          1,
		memory:       1,
		disk:         3,
		state:        stateCreating,
		desiredState: stateStarted,
		autoStop:     15,
		autoArchive:  10080,
		autoDelete:   -1,
		createdAt:    now,
		updatedAt:    now,
		// The list's default order (sandbox/dto/list-sandboxes-query.dto.ts:28).
		lastActivityAt: now,
	}, seq: s.seq}
	r.srv = s
	s.Store.Add(id, r)
	return r
}

// newID makes a UUID v4 like the real server's ids. It does not use the
// fault seed, so that reseeding faults mid-test cannot repeat an id.
func newID() string {
	var b [16]byte
	_, _ = crand.Read(b[:]) // never fails on supported platforms
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
