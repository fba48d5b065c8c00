package daytonaproxy

import (
	"bytes"
	"io"
	"net/http"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/provider"
)

// keepLabel rules a label replacement (PUT /sandbox/{id}/labels, a full
// replace) of a sandbox tether no longer answers for but labelled to be
// kept: one the drain stopped on purpose (on_drain stop), or one released
// as kept (its hand-back labels it, in lease mode or not). provider.LabelKeep=true
// goes back into the replacement, so a runner that relabels such a sandbox
// does not hand it to the next `tether sweep`. The intent is found as the
// proxy finds any (its index of this run's sandboxes, then the live
// intents), so one declared over the socket and no longer live is not. It
// reports whether the request goes on to the pass-through.
func (p *Proxy) keepLabel(w http.ResponseWriter, r *http.Request, rt route) bool {
	id := p.core.IntentFor(p.accountOf(r.Header), rt.idOrName)
	if id == "" {
		return true
	}
	in, err := p.Journal.Get(id)
	if err != nil || !kept(in) || (in.SandboxID != rt.idOrName && in.Name != rt.idOrName) {
		return true
	}
	body, ok := p.core.ReadCreate(w, r)
	if !ok {
		return false
	}
	out, _, err := mergeLabelsBody(body, map[string]string{provider.LabelKeep: "true"})
	if err != nil {
		writeError(w, http.StatusBadRequest, "tether proxy: "+err.Error())
		return false
	}
	p.Logger.Debug("daytona proxy: label replacement of a sandbox tether keeps; "+provider.LabelKeep+" put back", "intent", in.ID, "sandbox", rt.idOrName)
	setPath(r, rt.path)
	r.Body = io.NopCloser(bytes.NewReader(out))
	r.ContentLength = int64(len(out))
	r.Header.Del("Content-Length")
	return true
}

// kept reports whether tether labels in's sandbox to be kept: stopped on
// purpose, or released as kept (under a lease, or by a tether that marks
// every sandbox released so: intent.Intent.KeepOwed).
func kept(in intent.Intent) bool {
	return in.State == intent.Stopped || in.State == intent.Released && in.Outcome == intent.OutcomeKept && (in.Lease > 0 || in.KeepOwed)
}
