package daytonatest

import (
	"net/http"
	"time"

	"github.com/tether-run/tether/provider/internal/simtest"
)

// forkRequest is the ForkSandbox schema.
type forkRequest struct {
	Name *string `json:"name"`
}

// fork follows SandboxService.forkSandbox (sandbox.service.ts:1085-1240):
// only a started, settled, non-GPU sandbox of a VM class can be forked; the
// fork copies the parent's class, snapshot, user, env, labels, resources,
// public flag, network block and its auto-stop, auto-archive and
// auto-delete intervals (:1122-1142), is named as asked or after its own
// id (sandbox.entity.ts:246-250), and the answer is the new fork in state
// creating at once, with no wait for it to start (sandbox.controller.ts:
// 807-814). Meanwhile the parent is `forking` (:1176-1185) until its runner
// has copied it. While the fork is not deleted, the parent's DELETE
// answers 400 (delete, :2020-2029).
func (s *Server) fork(w http.ResponseWriter, r *http.Request) {
	var req forkRequest
	if err := decodeBody(r, &req); err != nil && err.Error() != "empty body" {
		writeError(w, r, http.StatusBadRequest, "Invalid request body: "+err.Error())
		return
	}
	s.withSandbox(w, r, func(src *record, now time.Time) {
		switch {
		case src.class != ClassLinuxVM && src.class != ClassWindows:
			writeError(w, r, http.StatusUnprocessableEntity, "Forking is not supported for this sandbox") // :1093-1095
			return
		case src.state != stateStarted:
			writeError(w, r, http.StatusBadRequest, "Sandbox must be in started state to fork") // :1103-1105
			return
		case src.pending:
			writeError(w, r, http.StatusConflict, msgInProgress) // :1107-1109
			return
		case src.gpu > 0:
			writeError(w, r, http.StatusUnprocessableEntity, "Forking is not supported for GPU sandboxes") // :1115-1117
			return
		}
		name := ""
		if req.Name != nil {
			name = *req.Name
		}
		if name != "" && s.byNameLocked(src.org, name, now) != nil {
			// The unique name index refuses the insert; the parent goes
			// back to its state and nothing is stored (:1189-1217, 1235-1237).
			writeError(w, r, http.StatusConflict, "Sandbox with this name already exists")
			return
		}
		child := s.newRecordLocked(src.org, now)
		if name != "" {
			child.name = name
		}
		child.class, child.snapshot, child.user, child.target = src.class, src.snapshot, src.user, src.target
		child.env, child.labels = simtest.CopyMap(src.env), simtest.CopyMap(src.labels)
		child.cpu, child.memory, child.disk, child.gpu = src.cpu, src.memory, src.disk, src.gpu
		child.public, child.networkBlockAll = src.public, src.networkBlockAll
		child.autoStop, child.autoArchive, child.autoDelete = src.autoStop, src.autoArchive, src.autoDelete
		child.parent = src.id
		child.pending = true
		child.record(now)
		s.scheduleNatural(child, now)

		s.transition(src, now, stateForking)
		src.pending = true
		writeJSON(w, http.StatusOK, child.clone().sandboxJSON())
	})
}

// archive follows SandboxService.archive (sandbox.service.ts:355-387): only
// a settled, stopped sandbox that is not ephemeral; the answer is the
// sandbox archiving (sandbox.controller.ts:1132-1159, 200). Archiving is
// not pending (sandbox.entity.ts:438-444), so a DELETE meanwhile is taken.
func (s *Server) archive(w http.ResponseWriter, r *http.Request) {
	s.withSandbox(w, r, func(rec *record, now time.Time) {
		switch {
		case rec.state == stateError || rec.state == stateBuildFailed:
			writeError(w, r, http.StatusBadRequest, "Sandbox is in an errored state") // :358
			return
		case rec.state != rec.desiredState:
			writeError(w, r, http.StatusConflict, msgInProgress) // :360-362
			return
		case rec.state != stateStopped:
			writeError(w, r, http.StatusBadRequest, "Sandbox is not stopped") // :364-366
			return
		case rec.pending:
			writeError(w, r, http.StatusConflict, msgInProgress) // :368-370
			return
		case rec.autoDelete == 0:
			writeError(w, r, http.StatusBadRequest, "Ephemeral sandboxes cannot be archived") // :372-374
			return
		}
		s.transition(rec, now, stateArchiving)
		writeJSON(w, http.StatusOK, rec.clone().sandboxJSON())
	})
}
