package e2bproxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/intake/apiproxy"
)

// A fork (POST /sandboxes/{id}/fork, infra handlers/sandbox_fork.go:
// 37-186) boots count new sandboxes (1 to 100, :27-29, 70-85) from one
// checkpoint of a running sandbox; each carries its parent's metadata
// (the snapshot's, sandbox_resume.go:339-340, called for every fork at
// sandbox_fork.go:164), and E2B has no call to change it. Whatever the
// parent, each fork is a new sandbox this runner made, so every fork is
// journaled before the call is forwarded, as count intents, one per fork,
// and the i-th result's sandbox for the i-th intent (the answer is a list
// of count results, each the fork's sandbox or the error that kept it from
// starting, :150-185; spec SandboxForkResult). A fork of a sandbox of ours
// carries tether's metadata: its intent has the parent's name and intent
// (ParentIntent), and the reaper proves it ours by them, and gives each
// intent of a shared name a sandbox no other intent holds (a lost answer,
// provider.NameSharer). A fork of any other sandbox (a workspace the
// runner did not make through tether, or one a fork of that) carries none
// of tether's: its intent is witnessed, proved by the id the answer names;
// the parent is untouched. Every fork's timeout is capped like a create's;
// the parent's own is not changed by a fork (:63-68).

// maxForkCount is the most forks one call may ask for
// (sandbox_fork.go:27-29): E2B refuses a larger count before anything.
const maxForkCount = 100

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
	n := forkCount(c)
	if n < 1 || n > maxForkCount {
		// A count E2B refuses (400) before it forks anything.
		p.core.PassBody(w, r, raw)
		return
	}
	create := apiproxy.Create{
		Account: account, Kind: "fork", Count: n,
		Rewrite: func(in intent.Intent) ([]byte, error) {
			if end := c.capTimeout(p.MaxTimeout, time.Now()); !end.IsZero() {
				p.capped(in.ID, end)
			}
			p.noteAutoResume(in.ID, !ours || parent.Witnessed || p.mayRestore("", parent.ID))
			return c.encode()
		},
		Refused: forkRefused,
		Results: forkResults,
		Settle:  p.vouch,
	}
	switch {
	case ours && !parent.Witnessed:
		create.Name, create.ParentIntent = parent.Name, carriedIntent(parent)
	case ours:
		// A fork of a witnessed fork carries what its parent carries: the
		// metadata of a sandbox not ours.
		create.Witnessed, create.ParentIntent = true, parent.ID
	default:
		create.Witnessed = true
		p.Logger.Info("e2b proxy: a fork of a sandbox tether does not own; each fork is journaled and proved tether's by the id E2B answers, the parent is left alone", "parent", parentID, "count", n)
	}
	p.core.Create(w, r, create)
}

// carriedIntent is the tether-intent the parent's sandbox carries, which
// its forks carry too: the parent's own intent, or, when the parent is a
// fork itself, the intent its metadata came from.
func carriedIntent(parent intent.Intent) string {
	if parent.ParentIntent != "" {
		return parent.ParentIntent
	}
	return parent.ID
}

// forkCount is the forks a body asks for (1 when it names none; 0 when
// it is not a whole number, which E2B refuses).
func forkCount(c *body) int {
	raw, ok := c.fields["count"]
	if !ok || apiproxy.IsNull(raw) {
		return 1
	}
	var n int
	if json.Unmarshal(raw, &n) != nil {
		return 0
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

// forkResults reads a fork's answer, a list of results (spec
// SandboxForkResult: exactly one of sandbox or error), one per fork in
// the order asked. A result's error status is the one startSandbox met
// (sandbox_fork.go:170-172): a 429 or 400 is given before the fork is
// placed on a node (the team's concurrency at the reservation, the
// snapshot's data, orchestrator/create_instance.go:192-214, 264-267), so
// e2bAPI.CreatedNothing closes its intent; any other leaves it for the
// drain.
func forkResults(answer []byte) ([]apiproxy.SandboxResult, error) {
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
		return nil, err
	}
	made := make([]apiproxy.SandboxResult, len(results))
	for i, res := range results {
		switch {
		case res.Sandbox != nil && res.Sandbox.SandboxID != "":
			made[i].ID = res.Sandbox.SandboxID
		case res.Error != nil && res.Error.Code >= 400 && res.Error.Code <= 599:
			made[i].Status, made[i].Message = res.Error.Code, res.Error.Message
		default:
			// Neither, or an error without a status: nothing says it did
			// not start; the drain looks.
			made[i].Status, made[i].Message = http.StatusInternalServerError, errNoID.Error()
		}
	}
	return made, nil
}
