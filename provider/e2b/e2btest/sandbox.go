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
	snapshot           bool
	killedAt           time.Time
	killReason         string
	killedBy           string
	orphaned           bool
	pauses, resumes    int
	forkOf             string
	lost               bool
	seq                uint64
}

// Advance applies what the clock says happened since the last look: a
// running sandbox whose timeout has passed is paused when it was created
// with autoPause, else killed (orchestrator/evictor/evict.go:151-168; the
// evictor polls every 50 ms, evict.go:23, so the simulator takes the end
// as exact).
func (r *record) Advance(now time.Time) {
	if r.state != StateRunning || now.Before(r.endAt) {
		return
	}
	if r.autoPause {
		r.state = StatePaused
		r.snapshot = true
		r.pauses++
		// A paused sandbox's endAt is when it was paused
		// (handlers/sandbox_get.go:250).
		return
	}
	r.kill(r.endAt, KillTimeout, "")
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
// is a paused sandbox, which exists only as a snapshot.
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
		Snapshot: r.snapshot,
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
// (handlers/sandbox_get.go:134-137, handlers/sandboxes_list.go:468-472).
func (r *record) apiState() string {
	if r.state == StatePausing || r.state == StatePaused {
		return StatePaused
	}
	return StateRunning
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
