package apiproxy

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

// Create is one create request as the provider's proxy took it apart.
type Create struct {
	// Account is the fingerprint of the runner's credentials ("" without any).
	Account string
	// Name is the sandbox name the runner chose, journaled as the intent's
	// (it is what finds a lost create); "" lets the journal name it.
	Name string
	// Rewrite returns the body to forward for the journaled intent in:
	// the runner's body with tether's name, labels and lifetime rules.
	Rewrite func(in spool.Intent) ([]byte, error)
}

// ReadCreate reads a create body whole, up to MaxCreateBody. If it cannot,
// it has answered the runner (400, 413) and returns false.
func (p *Proxy) ReadCreate(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(io.LimitReader(r.Body, p.MaxCreateBody+1))
	if err != nil {
		// The runner hung up, or its body broke off: nothing was
		// forwarded, nothing journaled.
		p.API.WriteError(w, http.StatusBadRequest, "tether proxy: reading the create body: "+err.Error())
		return nil, false
	}
	if int64(len(body)) > p.MaxCreateBody {
		p.API.WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("tether proxy: create body over %d bytes", p.MaxCreateBody))
		return nil, false
	}
	return body, true
}

// PassBody passes r upstream untouched with body, read before by
// ReadCreate: a create that is not tether's to journal (the runner
// declared it to a tether itself).
func (p *Proxy) PassBody(w http.ResponseWriter, r *http.Request, body []byte) {
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	p.pass.ServeHTTP(w, r)
}

// Create journals the intent of c, then forwards the rewritten create and
// journals the sandbox id of its answer.
func (p *Proxy) Create(w http.ResponseWriter, r *http.Request, c Create) {
	p.CheckAccount(c.Account)

	// The intent is durable before anything reaches the provider. The
	// runner's hanging up does not cut the write short: a half-known
	// outcome would leave a name the drain polls for nothing.
	crashpoint.Hit(crashpoint.ProxyBeforeJournal)
	in, _, err := p.Declare(context.WithoutCancel(r.Context()), spool.NewIntent{
		Labels: p.Labels, Provider: p.Provider, Account: c.Account, Name: c.Name,
	})
	if err != nil {
		code := http.StatusServiceUnavailable
		if errors.Is(err, spool.ErrInvalid) {
			code = http.StatusBadRequest
		}
		p.log.Error(p.prefix+": intent not journaled; the create is refused", "err", err)
		p.API.WriteError(w, code, "tether proxy: the sandbox was not created, its intent could not be journaled: "+err.Error())
		return
	}
	p.remember(c.Account, in.Name, in.ID)
	crashpoint.Hit(crashpoint.ProxyAfterJournal)
	body, err := c.Rewrite(in)
	if err != nil {
		p.abandon(in, "the create body could not be rewritten: "+err.Error())
		p.API.WriteError(w, http.StatusInternalServerError, "tether proxy: rewriting the create body: "+err.Error())
		return
	}
	if r.Context().Err() != nil {
		p.abandon(in, "the runner hung up before its create was forwarded")
		return
	}
	p.log.Debug(p.prefix+": create", "intent", in.ID, "name", in.Name, "runner_named", c.Name != "")
	p.forward(w, r, body, in, c.Account)
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
	req, err := http.NewRequestWithContext(ctx, r.Method, u.String(), bytes.NewReader(body))
	if err != nil {
		p.API.WriteError(w, http.StatusInternalServerError, "tether proxy: "+err.Error())
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
			p.abandon(in, p.Name+" could not be reached, nothing was sent: "+describe(err))
		} else {
			p.log.Warn(p.prefix+": create got no answer; the drain resolves it by name", "intent", in.ID, "name", in.Name, "err", describe(err))
		}
		if r.Context().Err() == nil {
			p.API.WriteError(w, http.StatusBadGateway, "tether proxy: "+p.Name+" did not answer the create: "+describe(err))
		}
		return
	}
	answer, err := io.ReadAll(io.LimitReader(resp.Body, p.MaxCreateAnswer+1))
	resp.Body.Close()
	if err == nil && int64(len(answer)) > p.MaxCreateAnswer {
		err = fmt.Errorf("answer over %d bytes", p.MaxCreateAnswer)
	}
	if err != nil {
		p.log.Warn(p.prefix+": create answer cut short; the drain resolves it by name", "intent", in.ID, "name", in.Name, "status", resp.StatusCode, "err", describe(err))
		p.API.WriteError(w, http.StatusBadGateway, "tether proxy: "+p.Name+"'s answer to the create was cut short: "+describe(err))
		return
	}

	// The id is known before the runner hears of it, so a delete it sends
	// at once finds its intent; it is journaled while the runner reads its
	// answer, in the same group commits as other creates. Until it is on
	// disk, a crash leaves the intent pending and the drain finds the
	// sandbox by its name.
	crashpoint.Hit(crashpoint.ProxyAfterUpstream)
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		if id, err := p.API.SandboxID(answer); err != nil {
			p.log.Warn(p.prefix+": create succeeded but its answer names no sandbox; the drain resolves it by name", "intent", in.ID, "name", in.Name, "err", err)
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
		p.log.Info(p.prefix+": the runner hung up before the create's answer; the create went on and is journaled", "intent", in.ID, "name", in.Name, "status", resp.StatusCode)
	}
}

// observe journals the sandbox id a create answered with.
func (p *Proxy) observe(in spool.Intent, id string) {
	if _, err := p.Journal.Observe(in.ID, id); err != nil {
		p.log.Warn(p.prefix+": sandbox id not journaled; the drain resolves it by name", "intent", in.ID, "name", in.Name, "sandbox", id, "err", err)
	}
}

// failed handles a create the provider answered with an error. The intent
// stays for the drain to resolve by name (the create may have landed
// anyway), except after the answers API.CreatedNothing names.
func (p *Proxy) failed(in spool.Intent, status int) {
	if p.API.CreatedNothing(status) {
		p.abandon(in, fmt.Sprintf("%s refused the create with %d %s before creating anything", p.Name, status, http.StatusText(status)))
		return
	}
	p.log.Info(p.prefix+": create failed; the intent stays for the drain to resolve by name", "intent", in.ID, "name", in.Name, "status", status)
}

// abandon closes the intent of a create that certainly never reached the
// provider's create step, so the drain does not poll for its name.
func (p *Proxy) abandon(in spool.Intent, why string) {
	if _, err := p.Journal.CloseRefusedCreate(in.ID, why); err != nil {
		p.log.Warn(p.prefix+": could not close an intent whose create never happened; the drain resolves it", "intent", in.ID, "name", in.Name, "err", err)
		return
	}
	p.log.Debug(p.prefix+": intent closed, its create never happened", "intent", in.ID, "name", in.Name, "why", why)
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
