package daytonatest

import (
	"fmt"
	"net/http"
	"time"

	"github.com/tether-run/tether/provider/internal/simtest"
)

// Daytona's own state words (SandboxState in the spec).
const (
	stateCreating     = "creating"
	stateStarting     = "starting"
	stateStarted      = "started"
	stateStopping     = "stopping"
	stateStopped      = "stopped"
	stateDestroying   = "destroying"
	stateDestroyed    = "destroyed"
	stateArchiving    = "archiving"
	stateArchived     = "archived"
	stateRestoring    = "restoring"
	statePausing      = "pausing"
	statePaused       = "paused"
	stateResuming     = "resuming"
	stateForking      = "forking"
	stateError        = "error"
	stateBuildFailed  = "build_failed"
	statePendingBuild = "pending_build"
)

// inProgress are the states in which the real server refuses another state
// change with 409 "state change in progress" (the sandbox is pending, or its
// state is not yet its desired state). `archiving` is not among them for a
// delete: an archiving sandbox is not pending (sandbox.service.ts:376-384 sets
// only state and desiredState), so destroy accepts it (sandbox.service.ts:2016).
var inProgress = map[string]bool{
	stateCreating: true, stateStarting: true, stateStopping: true, stateDestroying: true,
	stateArchiving: true, stateRestoring: true, statePausing: true, stateResuming: true,
	"resizing": true, "snapshotting": true, "forking": true, "pulling_snapshot": true,
	"building_snapshot": true, "pending_build": true,
}

// settlesTo is where a transitional state ends up by itself.
var settlesTo = map[string]string{
	stateCreating:   stateStarted,
	stateStarting:   stateStarted,
	stateRestoring:  stateStarted,
	stateResuming:   stateStarted,
	stateStopping:   stateStopped,
	stateArchiving:  stateArchived,
	statePausing:    statePaused,
	stateDestroying: stateDestroyed,
	// A forked parent is back to started once its runner has copied it
	// (the runner's state sync moves it on; sandbox.service.ts:1176-1185
	// only sets forking).
	stateForking: stateStarted,
}

// desiredFor is the desired state that goes with a state.
func desiredFor(state string) string {
	switch state {
	case stateStopping, stateStopped:
		return stateStopped
	case stateDestroying, stateDestroyed:
		return stateDestroyed
	case stateArchiving, stateArchived:
		return stateArchived
	case statePausing, statePaused:
		return statePaused
	}
	return stateStarted
}

// record is one sandbox as the server stores it.
type record struct {
	view
	seq             uint64
	deleteRequested bool
	// pending is the real entity's flag: a requested state change has not
	// reached its desired state yet. A soft delete sets it
	// (sandbox.entity.ts:317-323); destroy refuses a pending sandbox with 409
	// (sandbox.service.ts:2016-2018), which is why a second DELETE is refused.
	pending bool
	parent  string // the sandbox this one was forked from, if any
	// deletedBy says what deleted it first (Sandbox.DeletedBy).
	deletedBy string
	held      bool   // Hold without end: no step runs until Release
	steps     []step // future state changes, in time order
	history   []version
	srv       *Server // for timings and faults; read under srv.Mu
	lease             // the lifecycle timers' own state (timers.go)
}

// view is what GET and list show of a sandbox at one moment.
type view struct {
	id, org, name, target, snapshot, user string
	class                                 string // sandboxClass: container, linux-vm, windows
	labels, env                           map[string]string
	public, networkBlockAll               bool
	cpu, gpu, memory, disk                int
	state, desiredState, errorReason      string
	autoStop, autoArchive, autoDelete     int
	createdAt, updatedAt, lastActivityAt  time.Time
}

// erroredDeleted is a sandbox whose delete was accepted while it was in an
// errored state: the real server answers 404 for it at once
// (sandbox.service.ts:1777-1783) and lists it only with
// includeErroredDeleted.
func (v view) erroredDeleted() bool {
	return v.desiredState == stateDestroyed && (v.state == stateError || v.state == stateBuildFailed)
}

type step struct {
	at    time.Time
	state string
}

type version struct {
	at time.Time
	v  view
}

func (r *record) clone() view {
	v := r.view
	v.labels = simtest.CopyMap(r.labels)
	v.env = simtest.CopyMap(r.env)
	return v
}

// historyKeep is how many versions a sandbox keeps before older ones that
// no lagging list can still see are dropped.
const historyKeep = 16

// record appends the current view to the history the lagging list reads.
func (r *record) record(at time.Time) {
	r.history = append(r.history, version{at: at, v: r.clone()})
	if len(r.history) <= historyKeep {
		return
	}
	// Keep the newest version at or before the oldest moment a list can
	// show (at - ListLag), and everything after it.
	seen := at.Add(-r.srv.Faults.ListLag)
	i := 0
	for i+1 < len(r.history) && !r.history[i+1].at.After(seen) {
		i++
	}
	r.history = r.history[i:]
}

// viewAt is the sandbox as it was at t; false if it did not exist yet.
func (r *record) viewAt(t time.Time) (view, bool) {
	for i := len(r.history) - 1; i >= 0; i-- {
		if !r.history[i].at.After(t) {
			return r.history[i].v, true
		}
	}
	return view{}, false
}

// Advance applies every state change due by now, in order, and with
// WithMinute the lifecycle timers that fall between them (timers.go).
func (r *record) Advance(now time.Time) {
	for {
		at, fire := r.srv.nextTimer(r, now)
		if !r.held && len(r.steps) > 0 && !r.steps[0].at.After(now) && (fire == nil || !r.steps[0].at.After(at)) {
			st := r.steps[0]
			r.steps = r.steps[1:]
			r.state = st.state
			r.updatedAt = st.at
			r.stateChanged(st.at)
			r.record(st.at)
			r.entered(st.at)
			continue
		}
		if fire == nil {
			r.checkedUntil = now
			return
		}
		fire()
	}
}

// entered runs what the real server does on reaching a state by itself.
func (r *record) entered(at time.Time) {
	if r.state == r.desiredState {
		r.pending = false
	}
	if r.state == stateError && r.desiredState == stateDestroyed {
		// A destroy that failed on the runner (Faults.DestroyFail): error
		// clears pending (sandbox.entity.ts:438-444); nothing retries it.
		r.pending = false
		r.errorReason = "destroy failed on the runner"
	}
	if r.state == stateStopped && r.autoDelete == 0 && !r.deleteRequested && r.srv.minute == 0 {
		// autoDeleteInterval 0 ("ephemeral") deletes a sandbox when it stops;
		// a sandbox that never stops is never deleted (a real leak: auto-stop 0 disables Daytona's own cleanup).
		// With WithMinute the auto-delete check does it, at its next run.
		r.deleteBy(DeletedByEphemeralStop)
		r.beginDestroy(at, r.srv.destroyLag)
	}
}

// beginDestroy is the synchronous part of a delete, what DELETE does before
// it answers (sandbox.service.ts:2031-2036 with sandbox.entity.ts:310-323):
// the sandbox is renamed DESTROYED_<name>_<unix ms> at once, so its name is
// free again, its desired state becomes destroyed and it is pending; its
// state does NOT change. GET keeps showing the old state (started, stopped,
// archived, paused, ...) until the destroy action runs, lag later
// (sandbox-destroy.action.ts:29-59; it runs from the sandbox manager, and
// does nothing while the sandbox's runner is not ready, :39-42). Then an
// archived (or pending-build) sandbox, which has nothing on a runner, is
// destroyed at once (:34-36); any other one is `destroying` until the runner
// has removed it (:54-56), then destroyed (:49-51).
func (r *record) beginDestroy(at time.Time, lag time.Duration) {
	if !r.deleteRequested {
		r.name = fmt.Sprintf("DESTROYED_%s_%d", r.name, at.UnixMilli())
	}
	r.deleteRequested = true
	r.pending = true
	r.desiredState = stateDestroyed
	r.updatedAt = at
	r.held = false
	act := at.Add(lag)
	switch r.state {
	case stateDestroying, stateDestroyed:
		// Already on its way (a Hold in destroying, an ephemeral stop).
		if len(r.steps) == 0 || r.steps[len(r.steps)-1].state != stateDestroyed {
			r.steps = []step{{at: act.Add(r.srv.destroyDelay + r.srv.Faults.Destroying), state: stateDestroyed}}
		}
	case stateArchived, statePendingBuild, stateError, stateBuildFailed:
		r.steps = []step{{at: act, state: stateDestroyed}}
	default:
		end := stateDestroyed
		if f := r.srv.Faults.DestroyFail; f > 0 && r.srv.Rand.Float64() < f {
			end = stateError // Faults.DestroyFail: on the runner, the destroy fails
		}
		r.steps = []step{{at: act, state: stateDestroying}, {at: act.Add(r.srv.destroyDelay + r.srv.Faults.Destroying), state: end}}
	}
	r.record(at)
}

// Sandbox.DeletedBy for the deletes no API call asked for; a DELETE is
// DeletedByAPI plus the caller's User-Agent.
const (
	DeletedByAPI           = simtest.DeletedByAPI
	DeletedByAutoStop      = "auto-stop (ephemeral)"
	DeletedByAutoDelete    = "auto-delete"
	DeletedByEphemeralStop = "stop (ephemeral)"
)

// deleteBy records what deleted r, once: a later delete of a sandbox
// already on its way changes nothing.
func (r *record) deleteBy(by string) {
	if !r.deleteRequested && r.deletedBy == "" {
		r.deletedBy = by
	}
}

// callerOf names the client of an API call by its User-Agent, so a
// sandbox's record says whether tether, the runner or a curl deleted it.
func callerOf(r *http.Request) string { return simtest.Caller(r) }

// settle schedules the rest of the natural progression from the current
// state, the first change happening at `at`.
func (r *record) settle(at time.Time) {
	r.steps = nil
	state := r.state
	for {
		next, ok := settlesTo[state]
		if !ok {
			return
		}
		r.steps = append(r.steps, step{at: at, state: next})
		state = next
		at = at.Add(r.delayOf(next))
	}
}

// delayOf is how long a state lasts before it settles.
func (r *record) delayOf(state string) time.Duration {
	switch state {
	case stateCreating, stateStarting, stateRestoring, stateResuming, stateForking:
		return r.srv.createDelay
	case stateStopping, stateArchiving, statePausing:
		return r.srv.stopDelay
	case stateDestroying:
		return r.srv.destroyDelay + r.srv.Faults.Destroying
	}
	return 0
}

func (r *record) Export() Sandbox {
	return Sandbox{
		ID: r.id, Org: r.org, Name: r.name,
		State: r.state, DesiredState: r.desiredState,
		Labels:              simtest.CopyMap(r.labels),
		AutoStopInterval:    r.autoStop,
		AutoArchiveInterval: r.autoArchive,
		AutoDeleteInterval:  r.autoDelete,
		CreatedAt:           r.createdAt,
		UpdatedAt:           r.updatedAt,
		LastActivityAt:      r.lastActivityAt,
		DeleteRequested:     r.deleteRequested,
		Pending:             r.pending,
		ErrorReason:         r.errorReason,
		ForkOf:              r.parent,
		Class:               r.class,
		GPU:                 r.gpu,
		DeletedBy:           r.deletedBy,
	}
}

// scheduleNatural moves a sandbox on from its current state after that
// state's usual delay.
func (s *Server) scheduleNatural(r *record, now time.Time) {
	r.settle(now.Add(r.delayOf(r.state)))
}

// scheduleNaturalAt moves a sandbox on from its current state at `at`.
func (s *Server) scheduleNaturalAt(r *record, at time.Time) {
	r.settle(at)
}

const timeLayout = "2006-01-02T15:04:05.000Z"

func stamp(t time.Time) string { return t.UTC().Format(timeLayout) }

// sandboxJSON is the Sandbox schema; every property the spec requires is
// always present (the generated Go client rejects a body without one).
type sandboxJSON struct {
	ID                  string            `json:"id"`
	OrganizationID      string            `json:"organizationId"`
	Name                string            `json:"name"`
	Snapshot            string            `json:"snapshot"`
	User                string            `json:"user"`
	Env                 map[string]string `json:"env"`
	Labels              map[string]string `json:"labels"`
	Public              bool              `json:"public"`
	NetworkBlockAll     bool              `json:"networkBlockAll"`
	Target              string            `json:"target"`
	CPU                 int               `json:"cpu"`
	GPU                 int               `json:"gpu"`
	Memory              int               `json:"memory"`
	Disk                int               `json:"disk"`
	State               string            `json:"state"`
	DesiredState        string            `json:"desiredState"`
	ErrorReason         string            `json:"errorReason,omitempty"`
	BackupState         string            `json:"backupState"`
	AutoStopInterval    int               `json:"autoStopInterval"`
	AutoArchiveInterval int               `json:"autoArchiveInterval"`
	AutoDeleteInterval  int               `json:"autoDeleteInterval"`
	Volumes             []struct{}        `json:"volumes"`
	CreatedAt           string            `json:"createdAt"`
	UpdatedAt           string            `json:"updatedAt"`
	LastActivityAt      string            `json:"lastActivityAt,omitempty"`
	SandboxClass        string            `json:"sandboxClass"`
	RunnerID            string            `json:"runnerId"`
	ToolboxProxyURL     string            `json:"toolboxProxyUrl"`
}

// listItemJSON is the SandboxListItem schema (no env, no network fields).
type listItemJSON struct {
	ID                  string            `json:"id"`
	OrganizationID      string            `json:"organizationId"`
	Name                string            `json:"name"`
	Target              string            `json:"target"`
	RunnerID            string            `json:"runnerId"`
	SandboxClass        string            `json:"sandboxClass"`
	State               string            `json:"state"`
	DesiredState        string            `json:"desiredState"`
	Snapshot            string            `json:"snapshot"`
	User                string            `json:"user"`
	ErrorReason         string            `json:"errorReason,omitempty"`
	Public              bool              `json:"public"`
	CPU                 int               `json:"cpu"`
	GPU                 int               `json:"gpu"`
	Memory              int               `json:"memory"`
	Disk                int               `json:"disk"`
	Labels              map[string]string `json:"labels"`
	BackupState         string            `json:"backupState"`
	AutoStopInterval    int               `json:"autoStopInterval"`
	AutoArchiveInterval int               `json:"autoArchiveInterval"`
	AutoDeleteInterval  int               `json:"autoDeleteInterval"`
	CreatedAt           string            `json:"createdAt"`
	UpdatedAt           string            `json:"updatedAt"`
	LastActivityAt      string            `json:"lastActivityAt,omitempty"`
	ToolboxProxyURL     string            `json:"toolboxProxyUrl"`
}

const (
	toolboxProxyURL = "https://proxy.app.daytona.io/toolbox"
	runnerID        = "runner-sim-1"
)

func (v view) sandboxJSON() sandboxJSON {
	return sandboxJSON{
		ID: v.id, OrganizationID: v.org, Name: v.name, Snapshot: v.snapshot, User: v.user,
		Env: nonNil(v.env), Labels: nonNil(v.labels),
		Public: v.public, NetworkBlockAll: v.networkBlockAll, Target: v.target,
		CPU: v.cpu, GPU: v.gpu, Memory: v.memory, Disk: v.disk,
		State: v.state, DesiredState: v.desiredState, ErrorReason: v.errorReason,
		BackupState:      "None",
		AutoStopInterval: v.autoStop, AutoArchiveInterval: v.autoArchive, AutoDeleteInterval: v.autoDelete,
		Volumes:   []struct{}{},
		CreatedAt: stamp(v.createdAt), UpdatedAt: stamp(v.updatedAt), LastActivityAt: stamp(v.lastActivityAt),
		SandboxClass: v.class, RunnerID: runnerID, ToolboxProxyURL: toolboxProxyURL,
	}
}

func (v view) listItemJSON() listItemJSON {
	return listItemJSON{
		ID: v.id, OrganizationID: v.org, Name: v.name, Target: v.target,
		RunnerID: runnerID, SandboxClass: v.class,
		State: v.state, DesiredState: v.desiredState, Snapshot: v.snapshot, User: v.user,
		ErrorReason: v.errorReason, Public: v.public,
		CPU: v.cpu, GPU: v.gpu, Memory: v.memory, Disk: v.disk,
		Labels: nonNil(v.labels), BackupState: "None",
		AutoStopInterval: v.autoStop, AutoArchiveInterval: v.autoArchive, AutoDeleteInterval: v.autoDelete,
		CreatedAt: stamp(v.createdAt), UpdatedAt: stamp(v.updatedAt), LastActivityAt: stamp(v.lastActivityAt),
		ToolboxProxyURL: toolboxProxyURL,
	}
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
