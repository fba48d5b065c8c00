package daytonaproxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/intake/apiproxy"
)

// fork serves POST /sandbox/{idOrName}/fork, which creates a sandbox as a
// create does (sandbox.service.ts:1085-1140: a new sandbox with the
// parent's labels and intervals): journal first, name it tether-<id> unless
// the runner named it, forward on a context of its own, journal the id,
// and remember the parent's intent, so the drain deletes the fork first
// (Daytona refuses to delete a parent with live forks, :2020-2029).
func (p *Proxy) fork(w http.ResponseWriter, r *http.Request, rt route) {
	body, ok := p.core.ReadCreate(w, r)
	if !ok {
		return
	}
	if len(body) == 0 {
		body = []byte("{}") // the ForkSandbox body is optional in every field
	}
	cb, err := parseCreate(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "tether proxy: fork: "+err.Error())
		return
	}
	account := p.accountOf(r.Header)
	p.core.Create(w, r, apiproxy.Create{
		Account:      account,
		Name:         cb.name,
		ParentIntent: p.core.IntentFor(account, rt.idOrName),
		Kind:         kindFork,
		Path:         rt.path,
		Rewrite:      func(in intent.Intent) ([]byte, error) { return forkBody(cb, in.Name) },
		Refused:      func(status int, answer []byte) string { return refused(kindFork, status, answer) },
		Settle:       p.settle(r, rt, kindFork),
	})
}

// forkBody is the fork body forwarded: the runner's, named name when the
// runner gave no name (Daytona would name it after its id, which no lookup
// by name could find).
func forkBody(cb *createBody, name string) ([]byte, error) {
	if cb.name != "" {
		return encodeFields(cb.fields)
	}
	fields := make(map[string]json.RawMessage, len(cb.fields)+1)
	for k, v := range cb.fields {
		fields[k] = v
	}
	var err error
	if fields[fieldName], err = json.Marshal(name); err != nil {
		return nil, err
	}
	return encodeFields(fields)
}

// adoptFork makes a new fork carry what a create through the proxy
// carries: the fork's own ownership and scope labels (it has its parent's,
// :1126) and the create's intervals (it has its parent's, :1136-1138, which
// a sandbox not created through the proxy may have off). Each is one call
// with the runner's credentials, only when something differs. A failure is
// logged: the fork stays journaled, and the drain proves it ours by its
// name and its parent's labels.
func (p *Proxy) adoptFork(ctx context.Context, r *http.Request, rt route, in intent.Intent, sb answeredSandbox) answeredSandbox {
	merged, _ := apiproxy.OverRunners(sb.Labels, in.Labels)
	if !sameMap(merged, sb.Labels) {
		body, err := json.Marshal(map[string]map[string]string{fieldLabelsBody: merged})
		if err == nil {
			err = p.expectOK(p.core.Call(ctx, r, http.MethodPut, rt.prefix+"/sandbox/"+sb.ID+"/labels", body))
		}
		if err != nil {
			p.Logger.Warn("daytona proxy: the fork keeps its parent's labels; the drain proves it ours by name", "intent", in.ID, "sandbox", sb.ID, "err", err.Error())
		} else {
			sb.Labels = merged
		}
	}
	iv := p.intervals()
	for _, s := range []struct {
		field, setter string
		now           *int
	}{
		{fieldAutoStop, setterAutoStop, sb.AutoStop},
		{fieldAutoDelete, setterAutoDelete, sb.AutoDelete},
	} {
		if s.now == nil {
			continue
		}
		v, set := iv.apply(s.field, intervalJSON(*s.now))
		if !set {
			continue
		}
		err := p.expectOK(p.core.Call(ctx, r, http.MethodPost, rt.prefix+"/sandbox/"+sb.ID+"/"+s.setter+"/"+string(v), nil))
		if err != nil {
			p.Logger.Warn("daytona proxy: could not set the fork's interval", "intent", in.ID, "sandbox", sb.ID, "interval", s.field, "err", err.Error())
			continue
		}
		p.Logger.Info("daytona proxy: "+iv.replacedBy()+" replaces the fork's intervals", "intent", in.ID, "call", kindFork, "parent_had", map[string]string{s.field: strconv.Itoa(*s.now)}, "sent", string(v))
		if n, err := strconv.Atoi(string(v)); err == nil {
			*s.now = n
			if s.field == fieldAutoStop {
				sb.AutoStopMinutes = n
			}
		}
	}
	return sb
}

// expectOK turns an upstream call's answer other than 2xx into an error.
func (p *Proxy) expectOK(status int, answer []byte, err error) error {
	if err != nil {
		return err
	}
	if status < 200 || status > 299 {
		return fmt.Errorf("HTTP %d: %s", status, errorMessage(answer))
	}
	return nil
}

func sameMap(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
