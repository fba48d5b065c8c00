package daytonaproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/tether-run/tether/internal/crashpoint"
	"github.com/tether-run/tether/spool"
)

// create serves POST /sandbox: journal first, rewrite, forward, journal the id.
func (p *Proxy) create(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, p.MaxCreateBody+1))
	if err != nil {
		// The runner hung up, or its body broke off: nothing was
		// forwarded, nothing journaled.
		writeError(w, http.StatusBadRequest, "tether proxy: reading the create body: "+err.Error())
		return
	}
	if int64(len(body)) > p.MaxCreateBody {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("tether proxy: create body over %d bytes", p.MaxCreateBody))
		return
	}
	cb, err := parseCreate(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "tether proxy: "+err.Error())
		return
	}
	if cb.declared() {
		p.createDeclared(w, r, body)
		return
	}
	account := p.accountOf(r.Header)
	p.checkAccount(account)

	// The intent is durable before anything reaches Daytona. The runner's
	// hanging up does not cut the write short: a half-known outcome would
	// leave a name the drain polls for nothing.
	crashpoint.Hit(crashpoint.ProxyBeforeJournal)
	in, _, err := p.Journal.Create(context.WithoutCancel(r.Context()), spool.NewIntent{
		Labels: p.Labels, Provider: p.Provider, Account: account, Name: cb.name,
	})
	if err != nil {
		code := http.StatusServiceUnavailable
		if errors.Is(err, spool.ErrInvalid) {
			code = http.StatusBadRequest
		}
		p.Logger.Error("daytona proxy: intent not journaled; the create is refused", "err", err)
		writeError(w, code, "tether proxy: the sandbox was not created, its intent could not be journaled: "+err.Error())
		return
	}
	p.remember(account, in.Name, in.ID)
	crashpoint.Hit(crashpoint.ProxyAfterJournal)
	out, overridden, err := cb.rewrite(in.Name, in.Labels, p.AutoStopMinutes)
	if err == nil && p.LeaseMinutes > 0 {
		var replaced map[string]string
		if out, replaced, err = leaseBody(out, p.LeaseMinutes); err == nil && len(replaced) > 0 {
			p.Logger.Info("daytona proxy: lease mode replaces the runner's intervals", "intent", in.ID, "runner_sent", replaced)
		}
	}
	if err != nil {
		p.abandon(in, "the create body could not be rewritten: "+err.Error())
		writeError(w, http.StatusInternalServerError, "tether proxy: rewriting the create body: "+err.Error())
		return
	}
	if len(overridden) > 0 {
		p.Logger.Warn("daytona proxy: the runner's labels clash with tether's scope labels; tether's are kept", "intent", in.ID, "labels", strings.Join(overridden, ","))
	}
	if r.Context().Err() != nil {
		p.abandon(in, "the runner hung up before its create was forwarded")
		return
	}
	p.Logger.Debug("daytona proxy: create", "intent", in.ID, "name", in.Name, "runner_named", cb.name != "")
	p.forward(w, r, out, in, account)
}

// createDeclared passes a create the runner declared to tether itself
// (its labels carry an owner: the socket API, a spool file, or another
// tether further in) through untouched: the runner answers for it as it
// always did, and nothing is journaled twice.
func (p *Proxy) createDeclared(w http.ResponseWriter, r *http.Request, body []byte) {
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	p.pass.ServeHTTP(w, r)
}

// forward sends the create upstream on a context the runner cannot cancel,
// bounded by CreateTimeout only: not even Close ends it, since a runner
// killed mid-create is exactly when the id matters (the drain that follows
// finds the sandbox by name meanwhile). It reads the answer to its end,
// answers the runner with it byte for byte, and journals the sandbox id.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, body []byte, in spool.Intent, account string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), p.CreateTimeout)
	defer cancel()

	u := *r.URL
	u.Scheme, u.Host = p.upstream.Scheme, p.upstream.Host
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		writeError(w, http.StatusInternalServerError, "tether proxy: "+err.Error())
		return
	}
	req.Header = forwardHeaders(r.Header)
	// The answer is read here for its id: ask for it uncompressed.
	req.Header.Set("Accept-Encoding", "identity")
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header.Set("User-Agent", "") // none, as the runner sent none (not Go's own)
	}

	resp, err := p.Transport.RoundTrip(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			p.abandon(in, "Daytona could not be reached, nothing was sent: "+describe(err))
		} else {
			p.Logger.Warn("daytona proxy: create got no answer; the drain resolves it by name", "intent", in.ID, "name", in.Name, "err", describe(err))
		}
		if r.Context().Err() == nil {
			writeError(w, http.StatusBadGateway, "tether proxy: Daytona did not answer the create: "+describe(err))
		}
		return
	}
	answer, err := io.ReadAll(io.LimitReader(resp.Body, p.MaxCreateAnswer+1))
	resp.Body.Close()
	if err == nil && int64(len(answer)) > p.MaxCreateAnswer {
		err = fmt.Errorf("answer over %d bytes", p.MaxCreateAnswer)
	}
	if err != nil {
		p.Logger.Warn("daytona proxy: create answer cut short; the drain resolves it by name", "intent", in.ID, "name", in.Name, "status", resp.StatusCode, "err", describe(err))
		writeError(w, http.StatusBadGateway, "tether proxy: Daytona's answer to the create was cut short: "+describe(err))
		return
	}

	// The id is known before the runner hears of it, so a DELETE it sends
	// at once finds its intent; it is journaled while the runner reads its
	// answer, in the same group commits as other creates. Until it is on
	// disk, a crash leaves the intent pending and the drain finds the
	// sandbox by its name.
	crashpoint.Hit(crashpoint.ProxyAfterUpstream)
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		if id, err := sandboxID(answer); err != nil {
			p.Logger.Warn("daytona proxy: create succeeded but its answer names no sandbox; the drain resolves it by name", "intent", in.ID, "name", in.Name, "err", err)
		} else {
			p.remember(account, id, in.ID)
			go p.observe(in, id)
		}
	} else {
		p.failed(in, resp.StatusCode)
	}

	h := w.Header()
	for k, v := range forwardHeaders(resp.Header) {
		h[k] = v
	}
	h.Set("Content-Length", strconv.Itoa(len(answer)))
	w.WriteHeader(resp.StatusCode)
	w.Write(answer)
	if r.Context().Err() != nil {
		p.Logger.Info("daytona proxy: the runner hung up before the create's answer; the create went on and is journaled", "intent", in.ID, "name", in.Name, "status", resp.StatusCode)
	}
}

// observe journals the sandbox id a create answered with.
func (p *Proxy) observe(in spool.Intent, id string) {
	if _, err := p.Journal.Observe(in.ID, id); err != nil {
		p.Logger.Warn("daytona proxy: sandbox id not journaled; the drain resolves it by name", "intent", in.ID, "name", in.Name, "sandbox", id, "err", err)
	}
}

// failed handles a create Daytona answered with an error. The intent stays
// for the drain to resolve by name (the create may have landed anyway: a
// 400 "failed to start", a 500 after the allocation), except after the
// answers Daytona gives before it does anything at all (authentication,
// permission and quota refusals, rate limits), where nothing can land.
func (p *Proxy) failed(in spool.Intent, status int) {
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden || status == http.StatusTooManyRequests:
		p.abandon(in, fmt.Sprintf("Daytona refused the create with %d %s before creating anything", status, http.StatusText(status)))
		return
	}
	p.Logger.Info("daytona proxy: create failed; the intent stays for the drain to resolve by name", "intent", in.ID, "name", in.Name, "status", status)
}

// abandon closes the intent of a create that certainly never reached
// Daytona's create step, so the drain does not poll for its name.
func (p *Proxy) abandon(in spool.Intent, why string) {
	if _, err := p.Journal.CloseRefusedCreate(in.ID, why); err != nil {
		p.Logger.Warn("daytona proxy: could not close an intent whose create never happened; the drain resolves it", "intent", in.ID, "name", in.Name, "err", err)
		return
	}
	p.Logger.Debug("daytona proxy: intent closed, its create never happened", "intent", in.ID, "name", in.Name, "why", why)
}

// hopHeaders are meaningful for one connection only, never forwarded.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Content-Length"}

// forwardHeaders copies h without its hop-by-hop headers (and without
// Content-Length, which the body sets).
func forwardHeaders(h http.Header) http.Header {
	out := h.Clone()
	for _, f := range h.Values("Connection") {
		for _, k := range strings.Split(f, ",") {
			if k = strings.TrimSpace(k); k != "" {
				out.Del(k)
			}
		}
	}
	for _, k := range hopHeaders {
		out.Del(k)
	}
	return out
}
