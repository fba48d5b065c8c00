package daytonaproxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/intake/apiproxy"
)

// What a forwarded call creates.
const (
	kindCreate = "create"
	kindFork   = "fork"
)

// create serves POST /sandbox: a create that names a live intent of this
// journal passes untouched; any other is journaled first, rewritten with
// tether's name, labels and intervals, forwarded, and its id journaled
// (apiproxy).
func (p *Proxy) create(w http.ResponseWriter, r *http.Request, rt route) {
	body, ok := p.core.ReadCreate(w, r)
	if !ok {
		return
	}
	cb, err := parseCreate(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "tether proxy: "+err.Error())
		return
	}
	if p.RunnerDeclared(cb.labels, cb.name) {
		setPath(r, rt.path)
		p.core.PassBody(w, r, body)
		return
	}
	p.core.Create(w, r, apiproxy.Create{
		Account: p.accountOf(r.Header),
		Name:    cb.name,
		Kind:    kindCreate,
		Path:    rt.path,
		Rewrite: func(in intent.Intent) ([]byte, error) { return p.rewrite(cb, in) },
		Refused: func(status int, answer []byte) string { return refused(kindCreate, status, answer) },
		Settle:  p.settle(r, rt, kindCreate),
	})
}

// rewrite is the body forwarded for intent in: the runner's, with tether's
// name and labels, and the intervals as the rule (intervals) has them.
func (p *Proxy) rewrite(cb *createBody, in intent.Intent) ([]byte, error) {
	iv := p.intervals()
	out, overridden, replaced, err := cb.rewrite(in.Name, in.Labels, iv)
	if err != nil {
		return nil, err
	}
	if len(overridden) > 0 {
		p.Logger.Warn("daytona proxy: the runner's labels clash with tether's; tether's are kept", "intent", in.ID, "labels", strings.Join(overridden, ","))
	}
	if len(replaced) > 0 {
		p.Logger.Info("daytona proxy: "+iv.replacedBy()+" replaces the runner's intervals", "intent", in.ID, "call", kindCreate, "runner_sent", replaced)
	}
	return out, nil
}

// settle is what follows a create's or a fork's 2xx answer, before the
// runner hears of it: a fork gets its own labels and the interval rule
// (adoptFork), and the answer, Daytona's own read of the sandbox, vouches
// for it to the drain, in the organization the runner acted in.
func (p *Proxy) settle(r *http.Request, rt route, kind string) func(ctx context.Context, in intent.Intent, id string, answer []byte) {
	org := r.Header.Get(headerOrganization)
	return func(ctx context.Context, in intent.Intent, id string, answer []byte) {
		sb, err := decodeSandbox(answer)
		if err != nil {
			return
		}
		if kind == kindFork {
			sb = p.adoptFork(ctx, r, rt, in, sb)
		}
		if p.Vouch == nil || (org != "" && sb.Organization != org) {
			return
		}
		in.SandboxID = id
		if err := p.Vouch(in, sb.Sandbox); err != nil {
			p.Logger.Debug("daytona proxy: the answer does not prove the sandbox ours; the drain reads it first", "intent", in.ID, "sandbox", id, "why", err)
		}
	}
}

// refused is the reason a create (POST /sandbox) or a fork answered status
// stored nothing, or "" when it may have. From Daytona's API at v0.190.0
// (apps/api/src/sandbox/, services/sandbox.service.ts unless named):
//   - 401, 403, 429: the guards and the throttler, before the controller;
//   - 409: the unique name refused at the insert itself, so nothing was
//     stored (:711-713 for a create, :1235-1237 for a fork, whose failed
//     insert rolls the parent back, :1190-1216);
//   - 404: a create's every NotFoundException comes before its sandbox is
//     stored — the insert (:683 from a snapshot, :1029 from a build) or
//     the warm-pool sandbox given to the organization (:829): the region
//     (:468 and :857 to :2820, :2831; the quota's :205), the linked
//     sandbox (:538 to :1783) and its runner (:613; runner.service.ts:236),
//     the warm-pool sandbox's runner (:818). After the insert only the
//     answer is built (toSandboxDto, :2710-2713, reads no sandbox) and the
//     start is waited for (controllers/sandbox.controller.ts:1532-1567: the
//     sandbox, or 400). A fork's 404 (the parent, :1091; its region,
//     :1097-1100; its runner, :1111-1113) comes before the fork is built;
//   - for a fork, 422 as well: the parent cannot be forked (:1093-1095,
//     :1115-1117).
//
// A create's 400 and 422 are not among them. A 400 also says "failed to
// start" of a stored sandbox (sandbox.controller.ts:1547-1551, the wait
// for the start). Nothing on a create's path answers 422 — the API's only
// ones are the fork's two, resume's (:2087) and pause's (:2202), and its
// validation pipe answers 400 (main.ts:72-76) — so one comes from
// something in front of Daytona whose effect the source cannot tell: the
// cautious rule (stay pending, found by name) costs only polls.
func refused(kind string, status int, answer []byte) string {
	switch {
	case status == http.StatusUnauthorized, status == http.StatusForbidden, status == http.StatusTooManyRequests, status == http.StatusConflict:
	case status == http.StatusNotFound:
	case kind == kindFork && status == http.StatusUnprocessableEntity:
	default:
		return ""
	}
	return fmt.Sprintf("Daytona refused the %s with %d %s before storing anything: %s", kind, status, http.StatusText(status), errorMessage(answer))
}

// errorMessage is the message of a Daytona error answer, bounded, or "".
func errorMessage(answer []byte) string {
	var e errorBody
	if json.Unmarshal(answer, &e) != nil {
		return ""
	}
	const max = 200
	if len(e.Message) > max {
		return e.Message[:max] + "..."
	}
	return e.Message
}
