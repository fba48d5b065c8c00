package daytonaproxy

import (
	"net/http"
	"strings"

	"github.com/tether-run/tether/internal/intake/apiproxy"
	"github.com/tether-run/tether/spool"
)

// create serves POST /sandbox: a create the runner declared itself passes
// untouched; any other is journaled first, rewritten with tether's name,
// labels and auto-stop, forwarded, and its id journaled (apiproxy).
func (p *Proxy) create(w http.ResponseWriter, r *http.Request) {
	body, ok := p.core.ReadCreate(w, r)
	if !ok {
		return
	}
	cb, err := parseCreate(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "tether proxy: "+err.Error())
		return
	}
	if cb.declared() {
		// Its labels carry an owner (the socket API, a spool file, or
		// another tether further in): the runner answers for it as it
		// always did, and nothing is journaled twice.
		p.core.PassBody(w, r, body)
		return
	}
	p.core.Create(w, r, apiproxy.Create{
		Account: p.accountOf(r.Header),
		Name:    cb.name,
		Rewrite: func(in spool.Intent) ([]byte, error) { return p.rewrite(cb, in) },
	})
}

// rewrite is the body forwarded for intent in: the runner's, with tether's
// name, labels and auto-stop, and lease mode's intervals.
func (p *Proxy) rewrite(cb *createBody, in spool.Intent) ([]byte, error) {
	out, overridden, err := cb.rewrite(in.Name, in.Labels, p.AutoStopMinutes)
	if err != nil {
		return nil, err
	}
	if len(overridden) > 0 {
		p.Logger.Warn("daytona proxy: the runner's labels clash with tether's scope labels; tether's are kept", "intent", in.ID, "labels", strings.Join(overridden, ","))
	}
	if p.LeaseMinutes > 0 {
		var replaced map[string]string
		if out, replaced, err = leaseBody(out, p.LeaseMinutes); err != nil {
			return nil, err
		}
		if len(replaced) > 0 {
			p.Logger.Info("daytona proxy: lease mode replaces the runner's intervals", "intent", in.ID, "runner_sent", replaced)
		}
	}
	return out, nil
}
