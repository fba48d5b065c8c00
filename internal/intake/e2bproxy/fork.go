package e2bproxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/tether-run/tether/internal/intake/apiproxy"
	"github.com/tether-run/tether/spool"
)

// A fork (POST /sandboxes/{id}/fork, infra handlers/sandbox_fork.go:
// 37-185) boots count new sandboxes from a snapshot of a running one; each
// carries its parent's metadata, tether's keys included (the snapshot's,
// sandbox_resume.go:339), and E2B has no call to change it. So a fork of a
// sandbox of ours is journaled, before the call is forwarded, as an intent
// with the parent's name and ParentIntent: the reaper takes a sandbox
// carrying the parent's tether-intent as that intent's (mismatch), and the
// drain deletes forks before their parents. Its timeout is capped like a
// create's.

// fork serves POST /sandboxes/{id}/fork.
func (p *Proxy) fork(w http.ResponseWriter, r *http.Request, parentID string) {
	raw, ok := p.core.ReadCreate(w, r)
	if !ok {
		return
	}
	c, err := parseBody(raw)
	if err != nil {
		p.core.PassBody(w, r, raw) // E2B answers it as it would
		return
	}
	account := p.accountOf(r.Header)
	parent, ours := p.core.Ours(account, parentID)
	if !ours || forkCount(c) != 1 {
		if ours {
			// One intent per call is what the shared create path journals;
			// the forks of a count > 1 end by their capped timeout.
			p.Logger.Warn("e2b proxy: a fork of more than one sandbox is not journaled; its forks end by their timeout, capped", "parent_intent", parent.ID, "max", p.MaxTimeout)
		}
		if end := c.capTimeout(p.MaxTimeout, time.Now()); !end.IsZero() {
			if raw, err = c.encode(); err != nil {
				writeError(w, http.StatusInternalServerError, "tether proxy: "+err.Error())
				return
			}
		}
		p.core.PassBody(w, r, raw)
		return
	}
	p.core.Create(w, r, apiproxy.Create{
		Account: account, Name: parent.Name, ParentIntent: parent.ID, Kind: "fork",
		Rewrite: func(in spool.Intent) ([]byte, error) {
			if end := c.capTimeout(p.MaxTimeout, time.Now()); !end.IsZero() {
				p.capped(in.ID, end)
			}
			return c.encode()
		},
		Refused:  forkRefused,
		Answered: p.answered,
	})
}

// forkCount is the forks a body asks for (1 when it names none).
func forkCount(c *body) int {
	raw, ok := c.fields["count"]
	if !ok || isNull(raw) {
		return 1
	}
	var n int
	if json.Unmarshal(raw, &n) != nil {
		return 0 // E2B refuses it
	}
	return n
}

// forkRefused: E2B answers these before it checkpoints the parent or
// starts a fork — a body or count it refuses, the key, no such running
// sandbox, a paused parent or one in transition, the rate limit
// (sandbox_fork.go:37-136).
func forkRefused(status int, _ []byte) string {
	switch status {
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound,
		http.StatusConflict, http.StatusTooManyRequests:
		return fmt.Sprintf("E2B refused the fork with %d %s before starting it", status, http.StatusText(status))
	}
	return ""
}

// forkResultID reads the one fork's id from a fork's answer, a list of
// results (spec SandboxForkResult: sandbox or error).
func forkResultID(answer []byte) (string, error) {
	var results []struct {
		Sandbox *struct {
			SandboxID string `json:"sandboxID"`
		} `json:"sandbox"`
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(answer, &results); err != nil {
		return "", err
	}
	if len(results) != 1 {
		return "", fmt.Errorf("%d fork results, want 1", len(results))
	}
	if res := results[0]; res.Sandbox != nil && res.Sandbox.SandboxID != "" {
		return res.Sandbox.SandboxID, nil
	} else if res.Error != nil {
		return "", fmt.Errorf("the fork failed to start: %d %s", res.Error.Code, res.Error.Message)
	}
	return "", errNoID
}

// isList reports whether an answer is a JSON list (a fork's).
func isList(answer []byte) bool {
	t := bytes.TrimSpace(answer)
	return len(t) > 0 && t[0] == '['
}
