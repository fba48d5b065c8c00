// Package proxy is tether's third intake, beside the socket API and the
// spool directory: a Daytona API proxy on loopback. tether points the
// child's DAYTONA_API_URL at it, and every official Daytona SDK reads that
// variable, so a runner that knows nothing of tether is covered
// ("zero-code mode").
//
// POST /sandbox is the one call it takes apart. It journals an intent
// first; names the sandbox tether-<id> unless the runner named it (then
// that name is journaled: it is what finds a lost create); adds the
// ownership and scope labels beside the runner's own; turns a disabled
// auto-stop into the backstop; forwards the create on a context of its own,
// so a runner that hangs up or times out does not cancel it; reads the
// answer to the end and journals the sandbox id. A create the runner
// already declared to tether (its labels carry an owner) goes through
// untouched: the runner answers for it as before. A DELETE
// /sandbox/{idOrName} that succeeds moves the matching intent to
// releasing: the drain then only confirms the 404.
//
// Everything else passes through as it is, streaming: any method and path,
// websocket upgrades, the runner's headers (its Authorization and
// X-Daytona-* included), and Daytona's status, headers and body. An error
// stays an error. Credentials go from the runner to Daytona untouched and
// are never journaled or logged; only their fingerprint is, as the
// intent's account, and an account other than tether's own is reported.
package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/tether-run/tether/internal/intake"

	"github.com/tether-run/tether/provider/daytona"
	"github.com/tether-run/tether/spool"
)

// Bounds of the proxy. Each is a field of Proxy; zero means the default.
const (
	// DefaultCreateTimeout bounds one forwarded POST /sandbox, answer read
	// to its end. It runs on after the runner hangs up; Daytona itself
	// answers within about 30 s (it waits for the sandbox to start).
	DefaultCreateTimeout = 2 * time.Minute
	// DefaultMaxCreateBody bounds a create body the proxy reads to rewrite.
	// Daytona's own limit is smaller; a larger body is answered 413.
	DefaultMaxCreateBody = 4 << 20
	// DefaultMaxCreateAnswer bounds the create answer the proxy reads to
	// learn the id (a sandbox is a few KiB of JSON).
	DefaultMaxCreateAnswer = 16 << 20
	// DefaultMaxIdleConns is how many idle upstream connections are kept,
	// so that a burst of concurrent calls does not redial each time.
	DefaultMaxIdleConns = 256
	// maxKnown bounds the in-memory index from sandbox ids and names to
	// intents (two entries per create); past it the index starts over, and
	// a DELETE of an older sandbox finds its intent in the journal instead.
	maxKnown = 100_000
	// maxWarned bounds the accounts checkAccount reports, one line each.
	maxWarned = 64
	// readHeaderTimeout keeps a client that connects and says nothing from
	// holding a connection forever.
	readHeaderTimeout = 10 * time.Second
)

// Header names the proxy reads.
const (
	headerAuthorization = "Authorization"
	headerOrganization  = "X-Daytona-Organization-ID"
)

// Proxy is a Daytona API proxy that journals the sandboxes created through it.
type Proxy struct {
	// Intake is what the proxy shares with the other intakes: the journal,
	// the scope labels (added to every intent and sandbox), the provider
	// name, and Account, the fingerprint of tether's own credentials (""
	// without any): a runner that creates under another account is
	// reported. Delete and Observed are not used: the proxy learns ids
	// from create answers and applies the backstop in the create itself.
	*intake.Intake
	// Upstream is the real Daytona API URL (daytona.DefaultAPIURL if empty).
	Upstream string
	// AutoStopMinutes replaces an autoStopInterval of 0 (or null) in a
	// create; 0 leaves it as the runner sent it.
	AutoStopMinutes int
	// LeaseMinutes, in lease mode (tether run --lease), is the auto-stop
	// every create gets, with auto-delete 0 (lease.go); 0: off.
	LeaseMinutes int
	// Transport makes the upstream calls (default: http.DefaultTransport's
	// settings, without transparent compression, so bodies pass as sent).
	Transport http.RoundTripper

	CreateTimeout   time.Duration // default DefaultCreateTimeout
	MaxCreateBody   int64         // default DefaultMaxCreateBody
	MaxCreateAnswer int64         // default DefaultMaxCreateAnswer

	once     sync.Once
	initErr  error
	upstream *url.URL
	base     string // upstream path without its trailing slash, e.g. /api
	pass     *httputil.ReverseProxy
	srv      *http.Server
	ctx      context.Context // ends when the proxy closes
	cancel   context.CancelFunc

	mu     sync.Mutex
	known  map[string]string // account + "\x00" + sandbox id or name → intent id
	warned map[string]bool   // accounts already reported
}

func (p *Proxy) init() error {
	p.once.Do(func() {
		if p.Intake == nil {
			p.Intake = &intake.Intake{}
		}
		if p.Logger == nil {
			p.Logger = slog.New(slog.DiscardHandler)
		}
		if p.Upstream == "" {
			p.Upstream = daytona.DefaultAPIURL
		}
		u, err := url.Parse(p.Upstream)
		if err != nil {
			p.initErr = errors.New("daytona proxy: upstream: not a URL")
			return
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			p.initErr = fmt.Errorf("daytona proxy: upstream %q: want http(s)://host/path", u.Redacted())
			return
		}
		if u.User != nil {
			p.initErr = errors.New("daytona proxy: upstream URL must not carry credentials")
			return
		}
		p.upstream, p.base = u, strings.TrimRight(u.Path, "/")
		if p.CreateTimeout <= 0 {
			p.CreateTimeout = DefaultCreateTimeout
		}
		if p.MaxCreateBody <= 0 {
			p.MaxCreateBody = DefaultMaxCreateBody
		}
		if p.MaxCreateAnswer <= 0 {
			p.MaxCreateAnswer = DefaultMaxCreateAnswer
		}
		if p.Transport == nil {
			t := http.DefaultTransport.(*http.Transport).Clone()
			t.DisableCompression = true
			t.MaxIdleConns = DefaultMaxIdleConns
			t.MaxIdleConnsPerHost = DefaultMaxIdleConns
			p.Transport = t
		}
		p.known, p.warned = map[string]string{}, map[string]bool{}
		p.ctx, p.cancel = context.WithCancel(context.Background())
		p.pass = &httputil.ReverseProxy{
			Rewrite:        p.rewriteURL,
			Transport:      p.Transport,
			FlushInterval:  -1, // streaming: every write reaches the runner at once
			ErrorHandler:   p.upstreamError,
			ModifyResponse: p.afterPass,
			ErrorLog:       slog.NewLogLogger(p.Logger.Handler(), slog.LevelDebug),
		}
		p.srv = &http.Server{
			Handler:           p,
			ReadHeaderTimeout: readHeaderTimeout,
			BaseContext:       func(net.Listener) context.Context { return p.ctx },
			ErrorLog:          slog.NewLogLogger(p.Logger.Handler(), slog.LevelDebug),
		}
	})
	return p.initErr
}

// Listen opens the proxy's listener on addr (loopback; port 0 picks one).
func (p *Proxy) Listen(addr string) (net.Listener, error) {
	if err := p.init(); err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("daytona proxy: listen on %s: %w", addr, err)
	}
	return l, nil
}

// URL is the API URL the child gets as DAYTONA_API_URL for listener l: the
// proxy's address with the upstream's path (e.g. http://127.0.0.1:41234/api).
func (p *Proxy) URL(l net.Listener) string {
	return "http://" + l.Addr().String() + p.base
}

// Serve answers requests on l until Close. It returns nil after Close.
func (p *Proxy) Serve(l net.Listener) error {
	if err := p.init(); err != nil {
		return err
	}
	err := p.srv.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close stops serving at once: listeners and connections are closed, and
// pass-through calls and upgraded connections are cut. Creates still
// waiting for Daytona go on in the background (see forward); the drain
// that follows finds their sandboxes by name. It does not wait.
func (p *Proxy) Close() error {
	if err := p.init(); err != nil {
		return nil
	}
	p.cancel()
	return p.srv.Close()
}

// Actor is the proxy as an oklog/run actor on listener l. The interrupt
// never blocks.
func (p *Proxy) Actor(l net.Listener) (execute func() error, interrupt func(error)) {
	return func() error { return p.Serve(l) },
		func(error) { p.Close() }
}

// ServeHTTP routes POST /sandbox to the create, and everything else to the
// pass-through (a DELETE of one sandbox with a hook on its answer).
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := p.init(); err != nil {
		writeError(w, http.StatusBadGateway, err.Error())
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, p.base+"/sandbox")
	switch {
	case ok && r.Method == http.MethodPost && (rest == "" || rest == "/"):
		p.create(w, r)
		return
	case ok && r.Method == http.MethodDelete && len(rest) > 1 && rest[0] == '/' && !strings.Contains(rest[1:], "/"):
		r = r.WithContext(context.WithValue(r.Context(), deleteKey{}, &deletion{
			idOrName: rest[1:],
			account:  p.accountOf(r.Header),
		}))
	}
	p.pass.ServeHTTP(w, r)
}

// rewriteURL sends a request to the upstream host with its path and query
// as they are (the child's URL carries the upstream's path already).
func (p *Proxy) rewriteURL(pr *httputil.ProxyRequest) {
	pr.Out.URL.Scheme = p.upstream.Scheme
	pr.Out.URL.Host = p.upstream.Host
	pr.Out.Host = "" // the upstream's own Host, not the proxy's
}

// upstreamError answers a call Daytona never answered with a 502 in
// Daytona's error shape, so the SDK surfaces the message. A runner that
// hung up gets nothing.
func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return
	}
	msg := "tether proxy: Daytona did not answer: " + describe(err)
	p.Logger.Warn("daytona proxy: upstream call failed", "method", r.Method, "path", r.URL.Path, "err", describe(err))
	writeError(w, http.StatusBadGateway, msg)
}

// describe names a transport failure without its URL (a url.Error's
// message repeats the URL, query included).
func describe(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Op + ": " + ue.Err.Error()
	}
	return err.Error()
}

// accountOf is the fingerprint of the credentials a request carries,
// computed as tether's provider computes its own (an API key, or a JWT
// acting in an organization), or "" for a request without any.
func (p *Proxy) accountOf(h http.Header) string {
	token, ok := strings.CutPrefix(h.Get(headerAuthorization), "Bearer ")
	if !ok || token == "" {
		return ""
	}
	byKey := daytona.Fingerprint(p.Upstream, token)
	org := h.Get(headerOrganization)
	if org == "" || byKey == p.Account {
		return byKey
	}
	return daytona.Fingerprint(p.Upstream, "organization:"+org)
}

// checkAccount reports, once per account, a runner that creates sandboxes
// under credentials other than tether's: the drain will not touch them (it
// acts only under the account an intent was declared with) and reports
// them as unresolved.
func (p *Proxy) checkAccount(account string) {
	if account == p.Account {
		return
	}
	p.mu.Lock()
	// Past maxWarned accounts the rest go unreported here (the drain
	// reports their intents): a flood of bogus keys must not grow the map
	// or the log without bound.
	seen := p.warned[account] || len(p.warned) >= maxWarned
	if !seen {
		p.warned[account] = true
	}
	p.mu.Unlock()
	if seen {
		return
	}
	switch {
	case account == "":
		p.Logger.Warn("daytona proxy: a create without credentials; Daytona will refuse it")
	case p.Account == "":
		p.Logger.Warn("daytona proxy: tether has no Daytona credentials of its own; the sandboxes the runner creates are journaled but the drain cannot delete them (give tether the runner's DAYTONA_API_KEY)", "runner_account", account)
	default:
		p.Logger.Warn("daytona proxy: the runner creates sandboxes under another Daytona account than tether's; the drain leaves them live and reports them (give tether the same credentials)", "runner_account", account, "tether_account", p.Account)
	}
}

// remember maps a sandbox id or name, under an account, to its intent, for
// the DELETE that may follow.
func (p *Proxy) remember(account, idOrName, intent string) {
	p.mu.Lock()
	if len(p.known) >= maxKnown {
		clear(p.known)
	}
	p.known[account+"\x00"+idOrName] = intent
	p.mu.Unlock()
}

type deleteKey struct{}

// deletion is a DELETE /sandbox/{idOrName} on its way.
type deletion struct{ idOrName, account string }

// afterPass is the pass-through's hook on an answer: a DELETE that
// succeeded moves the sandbox's intent to releasing before the runner
// hears of it. The drain then confirms the 404 instead of deleting again.
func (p *Proxy) afterPass(resp *http.Response) error {
	d, _ := resp.Request.Context().Value(deleteKey{}).(*deletion)
	if d == nil || resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil
	}
	id := p.intentFor(d.account, d.idOrName)
	if id == "" {
		return nil
	}
	in, err := p.Journal.Transition(id, spool.Releasing, "")
	switch {
	case err == nil:
		p.Logger.Debug("daytona proxy: the runner deleted its sandbox; the drain only confirms it", "intent", in.ID, "name", in.Name, "sandbox", in.SandboxID)
	case errors.Is(err, spool.ErrIllegalTransition):
		// Released or resolved meanwhile: nothing left to say.
	default:
		p.Logger.Warn("daytona proxy: could not journal the runner's delete; the drain deletes it", "intent", id, "err", err)
	}
	return nil // the runner gets Daytona's answer whatever the journal said
}

// intentFor finds the live intent of a sandbox id or name under account:
// one the proxy journaled, else any live intent (declared over the socket
// or a spool file) with that id or name and the same account.
func (p *Proxy) intentFor(account, idOrName string) string {
	p.mu.Lock()
	id := p.known[account+"\x00"+idOrName]
	p.mu.Unlock()
	if id != "" {
		return id
	}
	live, err := p.Journal.Live()
	if err != nil {
		return ""
	}
	for _, in := range live {
		if in.Account == account && (in.SandboxID == idOrName || in.Name == idOrName) {
			return in.ID
		}
	}
	return ""
}

// errorBody is Daytona's error shape.
type errorBody struct {
	StatusCode int    `json:"statusCode"`
	Message    string `json:"message"`
	Error      string `json:"error"`
}

// writeError answers in Daytona's error shape.
func writeError(w http.ResponseWriter, code int, msg string) {
	b, _ := json.Marshal(errorBody{StatusCode: code, Message: msg, Error: http.StatusText(code)})
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	w.Write(b)
}
