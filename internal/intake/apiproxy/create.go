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

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/crashpoint"
	"github.com/tether-run/tether/journal"
)

// Create is one create request as the provider's proxy took it apart: a
// create, or another call that makes a sandbox (a fork).
type Create struct {
	// Account is the fingerprint of the runner's credentials ("" without any).
	Account string
	// Name is the sandbox name the runner chose, journaled as the intent's
	// (it is what finds a lost create); "" lets the journal name it.
	Name string
	// ParentIntent is the intent of the sandbox this one is forked from,
	// journaled with the intent (intent.Intent.ParentIntent); "" for none.
	ParentIntent string
	// Witnessed: the sandbox is proved the intent's by the id the answer
	// names, not by name and labels (intent.Intent.Witnessed).
	Witnessed bool
	// Kind names the call in logs and reasons ("create" if empty).
	Kind string
	// Path, if set, is the path the call is forwarded to (the provider's
	// canonical form of the runner's); empty: the runner's own.
	Path string
	// Rewrite returns the body to forward for the journaled intent in:
	// the runner's body with tether's name, labels and lifetime rules.
	// With Count above 1 it is called for each intent, in order, and the
	// body it returns for the last one is forwarded: such a call's body
	// names no intent.
	Rewrite func(in intent.Intent) ([]byte, error)
	// Count is how many sandboxes the call makes (a fork's count); 0 is 1.
	// Each is journaled as its own intent, all of them before the call is
	// forwarded, so that a sandbox the call makes always has one.
	Count int
	// Results, if set, reads a 2xx answer instead of API.SandboxID: one
	// entry per sandbox the call was asked to make, the i-th for the i-th
	// intent.
	Results func(answer []byte) ([]SandboxResult, error)
	// Refused, if set, is asked about an error answer instead of
	// API.CreatedNothing: a non-empty reason when the provider certainly
	// stored nothing, so the intent closes at once with it.
	Refused func(status int, answer []byte) string
	// Settle, if set, is called with a 2xx answer, once for each sandbox
	// it names, before the runner hears of it, on a context the runner
	// cannot cancel: the provider's proxy finishes what the call made (a
	// fork's own labels) and vouches for the sandbox.
	Settle func(ctx context.Context, in intent.Intent, sandboxID string, answer []byte)
}

// SandboxResult is one sandbox of a call's answer (Create.Results): its
// id, or the error status and message of one the call failed to make.
type SandboxResult struct {
	ID      string
	Status  int
	Message string
}

func (c Create) kind() string {
	if c.Kind == "" {
		return "create"
	}
	return c.Kind
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

// Create journals the intents of c, then forwards the rewritten create and
// journals the sandbox ids of its answer.
func (p *Proxy) Create(w http.ResponseWriter, r *http.Request, c Create) {
	p.CheckAccount(c.Account)

	// The intents are durable before anything reaches the provider. The
	// runner's hanging up does not cut the write short: a half-known
	// outcome would leave a name the drain polls for nothing.
	crashpoint.Hit(crashpoint.ProxyBeforeJournal)
	ins, err := p.declare(context.WithoutCancel(r.Context()), c)
	if err != nil {
		code := http.StatusServiceUnavailable
		if errors.Is(err, journal.ErrInvalid) {
			code = http.StatusBadRequest
		}
		p.log.Error(p.prefix+": intent not journaled; the create is refused", "err", err)
		p.API.WriteError(w, code, "tether proxy: the sandbox was not created, its intent could not be journaled: "+err.Error())
		return
	}
	crashpoint.Hit(crashpoint.ProxyAfterJournal)
	var body []byte
	for _, in := range ins {
		if body, err = c.Rewrite(in); err != nil {
			p.abandonAll(ins, "the "+c.kind()+" body could not be rewritten: "+err.Error())
			p.API.WriteError(w, http.StatusInternalServerError, "tether proxy: rewriting the "+c.kind()+" body: "+err.Error())
			return
		}
	}
	if r.Context().Err() != nil {
		p.abandonAll(ins, "the runner hung up before its "+c.kind()+" was forwarded")
		return
	}
	p.log.Debug(p.prefix+": "+c.kind(), "intent", ins[0].ID, "name", ins[0].Name, "runner_named", c.Name != "", "parent_intent", c.ParentIntent, "count", len(ins))
	p.forward(w, r, body, ins, c)
}

// declare journals the intents of c: one, or Count of them submitted
// together, so that they share a commit. When one of several fails, those
// journaled are closed: the call is refused.
func (p *Proxy) declare(ctx context.Context, c Create) ([]intent.Intent, error) {
	n := intent.Declaration{
		Labels: p.Labels, Provider: p.ProviderName(), Account: c.Account, Name: c.Name, ParentIntent: c.ParentIntent, Lease: p.Lease(),
		Witnessed: c.Witnessed,
	}
	if c.Count <= 1 {
		in, _, err := p.Declare(ctx, n)
		return []intent.Intent{in}, err
	}
	changes := make([]*journal.Change, 0, c.Count)
	var errs []error
	for range c.Count {
		ch, err := p.Journal.PrepareCreate(n)
		if err == nil {
			err = p.Journal.Submit(ch)
		}
		if err != nil {
			errs = append(errs, err)
			break
		}
		changes = append(changes, ch)
	}
	ins := make([]intent.Intent, 0, len(changes))
	for _, ch := range changes {
		in, err := ch.Wait(ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		p.Committed(ch, in)
		ins = append(ins, in)
	}
	if err := errors.Join(errs...); err != nil {
		p.abandonAll(ins, "another intent of the same "+c.kind()+" could not be journaled")
		return nil, err
	}
	return ins, nil
}

// forward sends the create upstream on a context the runner cannot cancel,
// bounded by CreateTimeout only: not even Close ends it, since a runner
// killed mid-create is exactly when the id matters (the drain that follows
// finds the sandbox by name meanwhile). It reads the answer to its end,
// answers the runner with it byte for byte, and journals the sandbox id.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, body []byte, ins []intent.Intent, c Create) {
	in := ins[0] // what the log lines name
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), p.CreateTimeout)
	defer cancel()

	u := *r.URL
	u.Scheme, u.Host = p.upstream.Scheme, p.upstream.Host
	if c.Path != "" {
		u.Path, u.RawPath = c.Path, ""
	}
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
			p.abandonAll(ins, p.Name+" could not be reached, nothing was sent: "+describe(err))
		} else {
			p.log.Warn(p.prefix+": "+c.kind()+" got no answer; the drain resolves it by name", "intent", in.ID, "name", in.Name, "err", describe(err))
		}
		if r.Context().Err() == nil {
			p.cut(w, r, err)
		}
		return
	}
	answer, err := io.ReadAll(io.LimitReader(resp.Body, p.MaxCreateAnswer+1))
	resp.Body.Close()
	if err == nil && int64(len(answer)) > p.MaxCreateAnswer {
		err = fmt.Errorf("answer over %d bytes", p.MaxCreateAnswer)
	}
	if err != nil {
		p.log.Warn(p.prefix+": "+c.kind()+" answer cut short; the drain resolves it by name", "intent", in.ID, "name", in.Name, "status", resp.StatusCode, "err", describe(err))
		p.cut(w, r, err)
		return
	}

	// The id is known before the runner hears of it, so a call it sends
	// at once finds its intent; it is journaled while the runner reads its
	// answer, in the same group commits as other creates. Until it is on
	// disk, a crash leaves the intent pending and the drain finds the
	// sandbox by its name.
	crashpoint.Hit(crashpoint.ProxyAfterUpstream)
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		p.journalAnswer(ctx, ins, c, answer)
	} else {
		for _, in := range ins {
			p.failed(in, c, resp.StatusCode, answer)
		}
	}

	h := w.Header()
	for k, v := range forwardHeaders(resp.Header) {
		h[k] = v
	}
	h.Set("Content-Length", strconv.Itoa(len(answer)))
	w.WriteHeader(resp.StatusCode)
	w.Write(answer)
	if r.Context().Err() != nil {
		p.log.Info(p.prefix+": the runner hung up before the "+c.kind()+"'s answer; it went on and is journaled", "intent", in.ID, "name", in.Name, "status", resp.StatusCode)
	}
}

// journalAnswer journals the sandbox ids of a 2xx answer, each with its
// intent; an intent whose sandbox the answer does not name stays for the
// drain to resolve by name, unless the provider says it made nothing.
func (p *Proxy) journalAnswer(ctx context.Context, ins []intent.Intent, c Create, answer []byte) {
	made, err := p.readResults(c, answer)
	if err != nil {
		p.log.Warn(p.prefix+": "+c.kind()+" succeeded but its answer names no sandbox; the drain resolves it by name", "intent", ins[0].ID, "name", ins[0].Name, "count", len(ins), "err", err)
		return
	}
	if len(made) != len(ins) {
		p.log.Warn(p.prefix+": "+c.kind()+" answered for another number of sandboxes than asked; those it does not name are resolved by the drain", "intent", ins[0].ID, "name", ins[0].Name, "asked", len(ins), "answered", len(made))
	}
	for i, in := range ins[:min(len(ins), len(made))] {
		m := made[i]
		switch {
		case m.ID != "":
			p.remember(c.Account, in.Name, m.ID, in.ID)
			if c.Settle != nil {
				c.Settle(ctx, in, m.ID, answer)
			}
			go p.observe(in, m.ID)
		case p.API.CreatedNothing(m.Status):
			p.abandon(in, fmt.Sprintf("%s failed to make this sandbox of the %s with %d %s before starting it: %s", p.Name, c.kind(), m.Status, http.StatusText(m.Status), m.Message))
		default:
			p.log.Info(p.prefix+": one sandbox of the "+c.kind()+" failed; its intent stays for the drain to resolve by name", "intent", in.ID, "name", in.Name, "status", m.Status)
		}
	}
}

// readResults reads the sandboxes a 2xx answer names (Create.Results,
// else the one of API.SandboxID).
func (p *Proxy) readResults(c Create, answer []byte) ([]SandboxResult, error) {
	if c.Results != nil {
		return c.Results(answer)
	}
	id, err := p.API.SandboxID(answer)
	if err != nil {
		return nil, err
	}
	return []SandboxResult{{ID: id}}, nil
}

// observe journals the sandbox id a create answered with.
func (p *Proxy) observe(in intent.Intent, id string) {
	if _, err := p.Journal.Observe(in.ID, id); err != nil {
		p.log.Warn(p.prefix+": sandbox id not journaled; the drain resolves it by name", "intent", in.ID, "name", in.Name, "sandbox", id, "err", err)
	}
}

// failed handles a create the provider answered with an error. The intent
// stays for the drain to resolve by name (the create may have landed
// anyway), except after the answers Create.Refused (else
// API.CreatedNothing) names, given before anything is stored.
func (p *Proxy) failed(in intent.Intent, c Create, status int, answer []byte) {
	why := ""
	switch {
	case c.Refused != nil:
		why = c.Refused(status, answer)
	case p.API.CreatedNothing(status):
		why = fmt.Sprintf("%s refused the %s with %d %s before creating anything", p.Name, c.kind(), status, http.StatusText(status))
	}
	if why != "" {
		p.abandon(in, why)
		return
	}
	p.log.Info(p.prefix+": "+c.kind()+" failed; the intent stays for the drain to resolve by name", "intent", in.ID, "name", in.Name, "status", status)
}

// cut ends the runner's request the way a provider that cannot be reached
// would have: its connection reset, no HTTP answer, so an SDK's retries on
// connection errors (urllib3's, the Go client's own) work as without
// tether. A connection that cannot be taken over (HTTP/2) gets a 502 in
// the provider's error shape instead.
func (p *Proxy) cut(w http.ResponseWriter, r *http.Request, err error) {
	p.log.Warn(p.prefix+": "+p.Name+" did not answer; the runner's connection is reset", "method", r.Method, "path", r.URL.Path, "err", describe(err))
	conn, _, herr := http.NewResponseController(w).Hijack()
	if herr != nil {
		p.API.WriteError(w, http.StatusBadGateway, "tether proxy: "+p.Name+" did not answer: "+describe(err))
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0) // an RST, not an orderly end the client could take for an empty answer
	}
	conn.Close()
}

// Call makes one call of tether's own to the provider with the runner's
// credentials (the headers of r), for a sandbox the runner just made (a
// fork's own labels), and returns the answer's status and body.
func (p *Proxy) Call(ctx context.Context, r *http.Request, method, path string, body []byte) (int, []byte, error) {
	u := *p.upstream
	u.Path, u.RawPath, u.RawQuery = path, "", ""
	req, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header = forwardHeaders(r.Header)
	req.Header.Set("Accept-Encoding", "identity")
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.Transport.RoundTrip(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s", describe(err))
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, p.MaxCreateAnswer))
	return resp.StatusCode, answer, err
}

// abandon closes the intent of a create that certainly never reached the
// provider's create step, so the drain does not poll for its name.
func (p *Proxy) abandon(in intent.Intent, why string) {
	if _, err := p.Journal.CloseRefusedCreate(in.ID, why); err != nil {
		p.log.Warn(p.prefix+": could not close an intent whose create never happened; the drain resolves it", "intent", in.ID, "name", in.Name, "err", err)
		return
	}
	p.log.Debug(p.prefix+": intent closed, its create never happened", "intent", in.ID, "name", in.Name, "why", why)
}

// abandonAll abandons each of ins.
func (p *Proxy) abandonAll(ins []intent.Intent, why string) {
	for _, in := range ins {
		p.abandon(in, why)
	}
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
