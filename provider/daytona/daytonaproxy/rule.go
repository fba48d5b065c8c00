package daytonaproxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/tether-run/tether/internal/intake/apiproxy"
)

// The calls after a create that could undo what the proxy set on one of
// this tether's sandboxes are ruled as the create was: a label replacement
// keeps tether's labels, an interval setter follows the create's interval
// rule (intervals). A call for any other sandbox passes as it is.

// labelsBody is the field of PUT /sandbox/{id}/labels that holds the labels
// (the SandboxLabels schema).
const fieldLabelsBody = "labels"

// replaceLabels rules PUT /sandbox/{idOrName}/labels, a full replacement
// (sandbox.service.ts:2837-2850): for a sandbox of this tether, tether's
// ownership and scope labels go back into the replacement, so the drain
// still proves the sandbox ours. The runner's labels are all kept, but a
// value it gave one of tether's keys. It reports whether the request goes
// on to the pass-through (false: it has been answered).
func (p *Proxy) replaceLabels(w http.ResponseWriter, r *http.Request, rt route) bool {
	in, ok := p.core.Ours(p.accountOf(r.Header), rt.idOrName)
	if !ok {
		return p.keepLabel(w, r, rt) // keep.go
	}
	body, ok := p.core.ReadCreate(w, r)
	if !ok {
		return false
	}
	out, overridden, err := mergeLabelsBody(body, in.Labels)
	if err != nil {
		writeError(w, http.StatusBadRequest, "tether proxy: "+err.Error())
		return false
	}
	if len(overridden) > 0 {
		p.Logger.Warn("daytona proxy: the runner's label replacement changes tether's labels; tether's are kept", "intent", in.ID, "labels", strings.Join(overridden, ","))
	}
	p.Logger.Debug("daytona proxy: label replacement of a sandbox of tether's; tether's labels put back", "intent", in.ID, "sandbox", rt.idOrName)
	setPath(r, rt.path)
	r.Body = io.NopCloser(bytes.NewReader(out))
	r.ContentLength = int64(len(out))
	r.Header.Del("Content-Length")
	return true
}

// mergeLabelsBody is a label replacement body with tether's labels merged
// over the runner's; every other field is kept as sent. A body whose labels
// are not an object of strings is refused: forwarded, it could remove
// tether's labels.
func mergeLabelsBody(body []byte, tether map[string]string) (out []byte, overridden []string, err error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		return nil, nil, fmt.Errorf("label replacement: body is not a JSON object")
	}
	var runner map[string]string
	if raw, ok := fields[fieldLabelsBody]; ok && !apiproxy.IsNull(raw) {
		if err := json.Unmarshal(raw, &runner); err != nil {
			return nil, nil, fmt.Errorf("label replacement: labels must be an object of strings")
		}
	}
	merged, overridden := apiproxy.OverRunners(runner, tether)
	if fields[fieldLabelsBody], err = json.Marshal(merged); err != nil {
		return nil, nil, err
	}
	out, err = encodeFields(fields)
	return out, overridden, err
}

// setter rules POST /sandbox/{idOrName}/autostop/{n} and /autodelete/{n}
// for a sandbox of this tether with the create's rule (intervals): a
// disabled auto-stop becomes the backstop, and in lease mode the lease's
// intervals stay. The replacement is logged with what the runner sent.
// /autoarchive/{n} is not ruled: archiving ends no sandbox and keeps none
// running.
func (p *Proxy) setter(r *http.Request, rt route) {
	field := ""
	switch rt.setter {
	case setterAutoStop:
		field = fieldAutoStop
	case setterAutoDelete:
		field = fieldAutoDelete
	default:
		return
	}
	in, ok := p.core.Ours(p.accountOf(r.Header), rt.idOrName)
	if !ok {
		return
	}
	iv := p.intervals()
	v, set := iv.apply(field, json.RawMessage(rt.interval))
	if !set {
		return
	}
	setPath(r, rt.build(string(v)))
	p.Logger.Info("daytona proxy: "+iv.replacedBy()+" replaces the runner's intervals", "intent", in.ID, "call", rt.setter, "runner_sent", map[string]string{field: rt.interval}, "sent", string(v))
}

// intervalJSON is an interval as a JSON number.
func intervalJSON(minutes int) json.RawMessage { return json.RawMessage(strconv.Itoa(minutes)) }
