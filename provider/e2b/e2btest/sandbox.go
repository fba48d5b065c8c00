package e2btest

import (
	"time"

	"github.com/tether-run/tether/provider/internal/simtest"
)

// record is one sandbox and its whole history.
type record struct {
	id, team, template string
	metadata           map[string]string
	state              string
	autoPause          bool
	startedAt, endAt   time.Time
	createdAt          time.Time
	// snapshot: the sandbox has a snapshot row with a ready build, written
	// by a pause, a fork's checkpoint of it or a named snapshot, and kept
	// until a DELETE removes it (handlers/sandbox_kill.go:84-96): no other
	// kill touches it. snapAt is that build's time (the endAt a paused
	// sandbox shows, handlers/sandbox_get.go:250), snapStartedAt the start
	// of the run it was taken of (:246), snapAutoPause the auto-pause it
	// recorded (orchestrator/pause_instance.go:126-164), which a resume
	// takes unless its body overrides it (handlers/sandbox_resume.go:313-316).
	snapshot                bool
	snapAt, snapStartedAt   time.Time
	snapAutoPause           bool
	evictions, checkpoints  int
	namedSnapshots, revived int
	killedAt                time.Time
	killReason              string
	killedBy                string
	orphaned                bool
	pauses, resumes         int
	forkOf                  string
	lost                    bool
	seq                     uint64
	// restored is closed when a restore in flight ends (nil when none);
	// raced says a DELETE answered 204 meanwhile.
	restored chan struct{}
	raced    bool
}

// Advance applies what the clock says happened since the last look: a
// running sandbox whose timeout has passed is paused when it was created
// with autoPause, else killed (orchestrator/evictor/evict.go:151-168; the
// evictor polls every 50 ms, evict.go:23, so the simulator takes the end
// as exact). The kill removes the sandbox from the store and its node but
// never its snapshot row (orchestrator/delete_instance.go:22-123 touches no
// snapshot; only the DELETE handler deletes one, handlers/sandbox_kill.go:
// 84-96): a sandbox that was ever paused, forked from or snapshotted reads
// as paused from then on, from its last snapshot (handlers/sandbox_get.go:
// 177-199, 246-251), is listed (sandboxes_list.go:362-393) and can be
// resumed, until a DELETE.
func (r *record) Advance(now time.Time) {
	if r.state != StateRunning || now.Before(r.endAt) {
		return
	}
	if r.autoPause {
		r.pauses++
		r.takeSnapshot(r.endAt)
		// A paused sandbox's endAt is when it was paused
		// (handlers/sandbox_get.go:250).
		r.state, r.endAt = StatePaused, r.snapAt
		return
	}
	if r.snapshot {
		r.evictions++
		r.state, r.startedAt, r.endAt, r.autoPause = StatePaused, r.snapStartedAt, r.snapAt, r.snapAutoPause
		return
	}
	r.kill(r.endAt, KillTimeout, "")
}

// takeSnapshot writes the sandbox's snapshot row at, as a pause, a fork's
// checkpoint and a named snapshot do (orchestrator/pause_instance.go:36,
// checkpoint_instance.go:64, snapshot_template.go:76, all through
// UpsertSnapshot: one row per sandbox, its latest build is what a resume
// restores).
func (r *record) takeSnapshot(at time.Time) {
	r.snapshot = true
	r.snapAt, r.snapStartedAt, r.snapAutoPause = at, r.startedAt, r.autoPause
}

// kill ends the sandbox and deletes its snapshot, if any: DELETE removes
// the running sandbox and then every snapshot of it
// (handlers/sandbox_kill.go:64-96).
func (r *record) kill(at time.Time, reason, by string) {
	r.state = StateKilled
	r.snapshot = false
	r.killedAt = at
	r.killReason = reason
	r.killedBy = by
}

// inStore reports whether the sandbox is in the orchestrator's store:
// running, pausing or being killed. A create in flight is not (it is
// added once its node answered, orchestrator/create_instance.go:473), nor
// is a paused sandbox, which exists only as a snapshot, nor one being
// restored from it (a reservation until the same Add).
func (r *record) inStore() bool {
	return r.state == StateRunning || r.state == StatePausing || r.state == StateKilling
}

func (r *record) Export() Sandbox {
	return Sandbox{
		ID: r.id, Team: r.team, TemplateID: r.template,
		Metadata:  simtest.CopyMap(r.metadata),
		State:     r.state,
		AutoPause: r.autoPause,
		StartedAt: r.startedAt, EndAt: r.endAt, CreatedAt: r.createdAt,
		Snapshot: r.snapshot, SnapshotAt: r.snapAt,
		Evictions: r.evictions, Checkpoints: r.checkpoints, NamedSnapshots: r.namedSnapshots, Revived: r.revived,
		KilledAt: r.killedAt, KillReason: r.killReason, KilledBy: r.killedBy,
		Orphaned: r.orphaned,
		Pauses:   r.pauses, Resumes: r.resumes,
		ForkOf: r.forkOf,
		Lost:   r.lost,
	}
}

// The real server's fixed answers for fields tether does not use.
const (
	clientID    = "6532622b" // packages/shared/pkg/consts, for backwards compatibility
	envdVersion = "0.2.0"
	cpuCount    = 2
	memoryMB    = 512
	diskSizeMB  = 512
)

// sandboxJSON is the Sandbox schema, the answer to a create, resume,
// connect or fork.
type sandboxJSON struct {
	TemplateID  string  `json:"templateID"`
	SandboxID   string  `json:"sandboxID"`
	ClientID    string  `json:"clientID"`
	EnvdVersion string  `json:"envdVersion"`
	Domain      *string `json:"domain"`
}

func (r *record) sandbox() sandboxJSON {
	return sandboxJSON{TemplateID: r.template, SandboxID: r.id, ClientID: clientID, EnvdVersion: envdVersion}
}

// listedJSON is the ListedSandbox schema, one item of GET /v2/sandboxes.
type listedJSON struct {
	TemplateID  string            `json:"templateID"`
	SandboxID   string            `json:"sandboxID"`
	ClientID    string            `json:"clientID"`
	StartedAt   time.Time         `json:"startedAt"`
	EndAt       time.Time         `json:"endAt"`
	CPUCount    int               `json:"cpuCount"`
	MemoryMB    int               `json:"memoryMB"`
	DiskSizeMB  int               `json:"diskSizeMB"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	State       string            `json:"state"`
	EnvdVersion string            `json:"envdVersion"`
}

// apiState is the state the API shows: a pausing sandbox reads as paused
// (handlers/sandbox_get.go:134-137, handlers/sandboxes_list.go:468-472),
// and so does one being restored while its snapshot is there (it is in no
// store yet, and the read falls back to the snapshot, sandbox_get.go:177).
func (r *record) apiState() string {
	if r.state == StatePausing || r.state == StatePaused || r.state == StateResuming {
		return StatePaused
	}
	return StateRunning
}

// visible reports whether the API shows the sandbox at all: from the store
// (running, pausing), or from its snapshot (paused, or being restored while
// its snapshot is there). One being created or killed, or restored after a
// DELETE removed its snapshot, is not.
func (r *record) visible() bool {
	switch r.state {
	case StateRunning, StatePausing, StatePaused:
		return true
	case StateResuming:
		return r.snapshot
	}
	return false
}

func (r *record) listed() listedJSON {
	out := listedJSON{
		TemplateID: r.template, SandboxID: r.id, ClientID: clientID,
		StartedAt: r.startedAt, EndAt: r.endAt,
		CPUCount: cpuCount, MemoryMB: memoryMB, DiskSizeMB: diskSizeMB,
		State: r.apiState(), EnvdVersion: envdVersion,
	}
	if len(r.metadata) > 0 {
		out.Metadata = simtest.CopyMap(r.metadata)
	}
	return out
}

// lifecycleJSON is the SandboxLifecycle schema (handlers/sandbox_get.go:22-32).
type lifecycleJSON struct {
	AutoResume bool   `json:"autoResume"`
	OnTimeout  string `json:"onTimeout"`
}

// detailJSON is the SandboxDetail schema, the answer to GET /sandboxes/{id}.
type detailJSON struct {
	listedJSON
	Domain    *string       `json:"domain"`
	Lifecycle lifecycleJSON `json:"lifecycle"`
}

func (r *record) detail() detailJSON {
	on := "kill"
	if r.autoPause {
		on = "pause"
	}
	return detailJSON{listedJSON: r.listed(), Lifecycle: lifecycleJSON{OnTimeout: on}}
}
