// Package apiproxy is the provider-neutral half of the zero-code intake: a
// proxy of a sandbox provider's HTTP API on loopback, which the child's SDK
// is pointed at. Each provider's proxy (daytonaproxy, e2bproxy) is a
// sibling package over it, and embeds Endpoint, the proxy as its caller
// reaches it (Open, URL, Serve, Close, its oklog/run actor).
//
// What is here does not depend on the provider's API: the loopback
// listener and its lifecycle (an oklog/run actor that never blocks), the
// streaming reverse proxy every other call passes through (any method and
// path, upgrades, the runner's headers and the provider's answers
// untouched), the body bounds, and the create path — the intent journaled
// before anything is forwarded, the create forwarded on a context the
// runner cannot cancel (it survives the runner hanging up and the proxy
// closing), the answer read to its end, the sandbox id journaled, and the
// intent closed when the create certainly never happened; another call
// that makes a sandbox (a fork) goes the same way. A delete the provider
// accepted marks the intent owning the deleted sandbox, so the drain only
// confirms it. A provider that cannot be reached is met as without tether:
// the runner's connection is reset, no HTTP answer is made up. The account
// of a runner's credentials other than tether's is reported.
//
// The proxy serves its own runner only. Any local user can reach a
// loopback port, so the child's URL carries a secret drawn for this run as
// its first path segment (http://127.0.0.1:PORT/<secret>/api). Daytona's
// SDKs append their paths to whatever base URL they are given (at v0.190.0:
// api-client-go api_sandbox.go:859 with sdk-go client.go:229-231; the
// TypeScript client's common.ts:124; the Python client's
// api_client.py:236). A request without it is refused
// before anything of it is read beyond its request line and headers (see
// admit): no body, no journal write, no call upstream, and at most one log
// line a minute. The secret is stripped from the path before anything
// else sees the request, and never logged. A proxy its provider serves on a
// listener only the runner can reach (Docker's Unix socket, mode 0600, its
// peers' uids checked at accept: a Docker client cannot carry a path in
// DOCKER_HOST) draws no secret (Config.Secretless).
//
// What is the provider's stays in its package, behind API and Create: which
// paths are a create and a delete, the create body (taken apart and
// rewritten: name, labels, the provider's lifetime rules), the answer's
// sandbox id, which error answers certainly created nothing, the error
// shape, and how credentials become an account.
package apiproxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/intake"
	"github.com/tether-run/tether/journal"
)

// Bounds of a proxy. Each is a field of Config; zero means the default.
const (
	// DefaultCreateTimeout bounds one forwarded create, answer read to its
	// end. It runs on after the runner hangs up.
	DefaultCreateTimeout = 2 * time.Minute
	// DefaultMaxCreateBody bounds a create body the proxy reads to rewrite;
	// a larger body is answered 413.
	DefaultMaxCreateBody = 4 << 20
	// DefaultMaxCreateAnswer bounds the create answer the proxy reads to
	// learn the id (a sandbox is a few KiB of JSON).
	DefaultMaxCreateAnswer = 16 << 20
	// DefaultMaxIdleConns is how many idle upstream connections are kept,
	// so that a burst of concurrent calls does not redial each time.
	DefaultMaxIdleConns = 256
	// maxKnown bounds the in-memory index from sandbox ids and names to
	// intents (two entries per create); past it the index starts over, and
	// a delete of an older sandbox finds its intent in the journal instead.
	maxKnown = 100_000
	// maxWarned bounds the accounts reported by CheckAccount, one line
	// each; past it, one line says that further accounts go unreported.
	maxWarned = 64
	// readHeaderTimeout keeps a client that connects and says nothing from
	// holding a connection forever.
	readHeaderTimeout = 10 * time.Second
	// secretBytes is the size of the run's secret: 128 random bits, drawn
	// from the kernel's generator, too many to guess through a port.
	secretBytes = 16
	// refusalLogEvery bounds the log lines about refused requests: the
	// first is said at once, later ones are counted and said at most once
	// per this period, so that a flood costs no log space.
	refusalLogEvery = time.Minute
	// SecretShown stands for the secret wherever the URL is shown.
	SecretShown = "<secret>"
)

// API is what a provider's proxy tells the shared half about its API.
type API interface {
	// WriteError answers in the provider's error shape, so that the
	// runner's SDK surfaces the message.
	WriteError(w http.ResponseWriter, code int, msg string)
	// SandboxID reads the sandbox id from a create's 2xx answer.
	SandboxID(answer []byte) (string, error)
	// CreatedNothing reports whether a create answered with status
	// certainly created nothing (the provider refuses it before doing
	// anything: authentication, permission, quota, rate limit). Any other
	// error may hide a sandbox, and its intent stays for the drain.
	CreatedNothing(status int) bool
}

// Config is one provider's proxy.
type Config struct {
	// Intake is what the proxy shares with the other intakes: the
	// journal, the scope labels, the provider name, and Account, the
	// fingerprint of tether's own credentials ("" without any).
	*intake.Intake
	API API
	// Name is the provider as logs and messages name it ("Daytona"), and
	// KeyEnv the variable of its API key ("DAYTONA_API_KEY"), URLEnv the
	// variable of its API URL, the one the child gets pointing at the
	// proxy ("DAYTONA_API_URL"). The name journaled with each intent is
	// the Intake's Provider.
	Name, KeyEnv, URLEnv string
	// Upstream is the real API URL, http(s)://host/path.
	Upstream string
	// TeamScoped: every credential of a team acts for the whole team (E2B),
	// so the drain acts on a sandbox made under other credentials once a
	// read with tether's own shows it of tether's team. Only what
	// CheckAccount says of such a runner depends on it.
	TeamScoped bool
	// Handler answers every request: the provider's routing, over Pass,
	// Create and PassDelete.
	Handler http.Handler
	// Transport makes the upstream calls (default: http.DefaultTransport's
	// settings, without transparent compression, so bodies pass as sent).
	Transport http.RoundTripper
	// Secretless: the caller serves the proxy on a listener only the
	// runner can reach (the Docker proxy's Unix socket: mode 0600, its
	// peers' uids checked), so no secret is drawn and every path is taken
	// as it comes (a Docker client cannot carry a path in DOCKER_HOST).
	// URL and ShownURL do not apply.
	Secretless bool

	CreateTimeout   time.Duration // default DefaultCreateTimeout
	MaxCreateBody   int64         // default DefaultMaxCreateBody
	MaxCreateAnswer int64         // default DefaultMaxCreateAnswer
}

// Proxy is the shared half of one provider's API proxy.
type Proxy struct {
	Config
	log      *slog.Logger
	prefix   string // "daytona proxy", the prefix of its log lines and errors
	upstream *url.URL
	base     string // upstream path without its trailing slash, e.g. /api
	pass     *httputil.ReverseProxy
	srv      *http.Server
	ctx      context.Context // ends when the proxy closes
	cancel   context.CancelFunc

	// secret is the first path segment of every request the runner may
	// make (hex, so that it needs no escaping in a URL).
	secret string
	// handler is Handler behind admit: what the listener serves.
	handler http.Handler

	mu         sync.Mutex
	known      map[string]string // account + "\x00" + sandbox id or name → intent id
	made       map[string]string // intent id → the sandbox id its create answered
	warned     map[string]bool   // accounts already reported, at most maxWarned
	warnedFull bool              // said that further accounts go unreported
	refused    int               // requests refused since the last line about them
	refusedLog time.Time         // when that line was said
}

// New checks c and fills in its defaults.
func New(c Config) (*Proxy, error) {
	p := &Proxy{Config: c, prefix: strings.ToLower(c.Name) + " proxy"}
	if p.Intake == nil {
		p.Intake = &intake.Intake{}
	}
	if p.Logger == nil {
		p.Logger = slog.New(slog.DiscardHandler)
	}
	p.log = p.Logger
	u, err := url.Parse(p.Upstream)
	if err != nil {
		return nil, fmt.Errorf("%s: upstream: not a URL", p.prefix)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%s: upstream %q: want http(s)://host/path", p.prefix, u.Redacted())
	}
	if u.User != nil {
		return nil, fmt.Errorf("%s: upstream URL must not carry credentials", p.prefix)
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
	p.known, p.made, p.warned = map[string]string{}, map[string]string{}, map[string]bool{}
	secret := make([]byte, secretBytes)
	if _, err := rand.Read(secret); err != nil {
		return nil, fmt.Errorf("%s: drawing the run's secret: %w", p.prefix, err)
	}
	p.secret = hex.EncodeToString(secret)
	p.handler = http.HandlerFunc(p.admit)
	if p.Secretless {
		p.handler = p.Handler
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.pass = &httputil.ReverseProxy{
		Rewrite:        p.rewriteURL,
		Transport:      p.Transport,
		FlushInterval:  -1, // streaming: every write reaches the runner at once
		ErrorHandler:   p.upstreamError,
		ModifyResponse: p.afterPass,
		ErrorLog:       slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
	p.srv = &http.Server{
		Handler:           p.handler,
		ReadHeaderTimeout: readHeaderTimeout,
		BaseContext:       func(net.Listener) context.Context { return p.ctx },
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
	return p, nil
}

// Base is the upstream URL's path without its trailing slash (e.g. /api):
// the child's URL carries it, so every request's path starts with it.
func (p *Proxy) Base() string { return p.base }

// Listen opens the proxy's listener on addr (loopback; port 0 picks one).
func (p *Proxy) Listen(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: listen on %s: %w", p.prefix, addr, err)
	}
	return l, nil
}

// URL is the API URL the child gets for listener l: the proxy's address,
// the run's secret and the upstream's path (e.g.
// http://127.0.0.1:41234/<secret>/api). It is a credential: only the child
// may learn it.
func (p *Proxy) URL(l net.Listener) string {
	return "http://" + l.Addr().String() + "/" + p.secret + p.base
}

// ShownURL is URL without the secret (SecretShown in its place), for logs
// and messages.
func (p *Proxy) ShownURL(l net.Listener) string {
	return "http://" + l.Addr().String() + "/" + SecretShown + p.base
}

// ServeHTTP answers one request as the listener does: refused without the
// run's secret, else Handler's.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) { p.handler.ServeHTTP(w, r) }

// admit is every request's way in. A request whose path does not start
// with the run's secret is refused with 403 before its body is read: the
// answer asks to close the connection, so that not even the server drains
// the body to reuse it, and a client waiting on "Expect: 100-continue"
// never hears "continue". Anything else goes on to Handler with the secret
// stripped from its path, so that no log line, journal record or upstream
// call ever sees it.
func (p *Proxy) admit(w http.ResponseWriter, r *http.Request) {
	rest, ok := p.unlock(r.URL.Path)
	if !ok {
		p.refuse(w)
		return
	}
	r2 := new(http.Request)
	*r2 = *r
	r2.URL = new(url.URL)
	*r2.URL = *r.URL
	r2.URL.Path = rest
	r2.URL.RawPath = ""
	if r.URL.RawPath != "" {
		// An escaped path keeps its escapes past the secret (hex: the
		// secret itself never needs one, and a request that escapes it
		// anyway still unlocks by its decoded path).
		if _, raw, found := strings.Cut(strings.TrimPrefix(r.URL.RawPath, "/"), "/"); found {
			r2.URL.RawPath = "/" + raw
		}
	}
	r2.RequestURI = r2.URL.RequestURI()
	p.Handler.ServeHTTP(w, r2)
}

// unlock returns path without its first segment when that segment is the
// run's secret (compared in constant time: the time of a refusal tells
// nothing about how close a guess was).
func (p *Proxy) unlock(path string) (rest string, ok bool) {
	if !strings.HasPrefix(path, "/") {
		return "", false
	}
	seg, rest, _ := strings.Cut(path[1:], "/")
	if subtle.ConstantTimeCompare([]byte(seg), []byte(p.secret)) != 1 {
		return "", false
	}
	return "/" + rest, true
}

// refuse answers a request without the run's secret and counts it.
func (p *Proxy) refuse(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	p.API.WriteError(w, http.StatusForbidden, "tether proxy: this URL lacks the run's secret; use "+p.URLEnv+" exactly as tether gave it to its child")
	p.mu.Lock()
	p.refused++
	now := time.Now()
	if !p.refusedLog.IsZero() && now.Sub(p.refusedLog) < refusalLogEvery {
		p.mu.Unlock()
		return
	}
	n := p.refused
	p.refused, p.refusedLog = 0, now
	p.mu.Unlock()
	p.logRefused(n)
}

// logRefused says that n requests were refused.
func (p *Proxy) logRefused(n int) {
	p.log.Warn(p.prefix+": refused requests without this run's secret in their URL (another process on this host, or a client given an old URL); nothing of them was read, journaled or forwarded; said at most once a minute", "refused", n)
}

// Serve answers requests on l until Close. It returns nil after Close.
func (p *Proxy) Serve(l net.Listener) error {
	err := p.srv.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close stops serving at once: listeners and connections are closed, and
// pass-through calls and upgraded connections are cut. Creates still
// waiting for the provider go on in the background (see forward); the
// drain that follows finds their sandboxes by name. It does not wait.
func (p *Proxy) Close() error {
	p.cancel()
	p.mu.Lock()
	n := p.refused
	p.refused = 0
	p.mu.Unlock()
	if n > 0 {
		p.logRefused(n)
	}
	return p.srv.Close()
}

// Actor is the proxy as an oklog/run actor on listener l. The interrupt
// never blocks.
func (p *Proxy) Actor(l net.Listener) (execute func() error, interrupt func(error)) {
	return func() error { return p.Serve(l) },
		func(error) { p.Close() }
}

// Pass forwards r upstream as it is, streaming both ways.
func (p *Proxy) Pass(w http.ResponseWriter, r *http.Request) { p.pass.ServeHTTP(w, r) }

// PassThen passes r upstream as Pass does, and calls then with the
// provider's status before the runner hears the answer (not at all when
// none came): what the proxy records of a call depends on how it ended.
func (p *Proxy) PassThen(w http.ResponseWriter, r *http.Request, then func(status int)) {
	p.pass.ServeHTTP(w, Then(r, then))
}

// Then is r with then to be called as PassThen calls it, for a request
// passed some other way (PassDelete).
func Then(r *http.Request, then func(status int)) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), thenKey{}, then))
}

type thenKey struct{}

// PassDelete passes a request that deletes the sandbox idOrName under
// account: an answer of 2xx marks its intent (MarkDeleteRequested) before
// the runner hears of it, so the drain confirms it gone instead of
// deleting it again.
func (p *Proxy) PassDelete(w http.ResponseWriter, r *http.Request, account, idOrName string) {
	r = r.WithContext(context.WithValue(r.Context(), deleteKey{}, &deletion{idOrName: idOrName, account: account, max: p.MaxCreateAnswer}))
	p.pass.ServeHTTP(w, r)
}

// rewriteURL sends a request to the upstream host with its path and query
// as they are (the child's URL carries the upstream's path already).
func (p *Proxy) rewriteURL(pr *httputil.ProxyRequest) {
	pr.Out.URL.Scheme = p.upstream.Scheme
	pr.Out.URL.Host = p.upstream.Host
	pr.Out.Host = "" // the upstream's own Host, not the proxy's
}

// upstreamError meets a call the provider never answered as the runner
// would have met it without tether: its connection is cut (see cut). A
// runner that hung up gets nothing.
func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return
	}
	p.cut(w, r, err)
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

// CheckAccount reports, once per account, a runner that creates sandboxes
// under credentials other than tether's: the drain will not touch them (it
// acts only under the account an intent was declared with) and reports
// them as unresolved.
func (p *Proxy) CheckAccount(account string) {
	if account == p.Account() {
		return
	}
	p.mu.Lock()
	// Past maxWarned accounts the rest go unreported here (the drain
	// reports their intents): a flood of bogus keys must not grow the map
	// or the log without bound.
	seen := p.warned[account]
	full := !seen && len(p.warned) >= maxWarned
	if !seen && !full {
		p.warned[account] = true
	}
	first := full && !p.warnedFull
	p.warnedFull = p.warnedFull || full
	p.mu.Unlock()
	switch {
	case seen || (full && !first):
		return
	case full:
		p.log.Warn(fmt.Sprintf("%s: creates under more than %d accounts other than tether's; further ones are not reported one by one", p.prefix, maxWarned))
		return
	case account == "":
		p.log.Warn(p.prefix + ": a create without credentials; " + p.Name + " will refuse it")
	case p.Account() == "":
		p.log.Warn(p.prefix+": tether has no "+p.Name+" credentials of its own; the sandboxes the runner creates are journaled but the drain cannot delete them (give tether the runner's "+p.KeyEnv+")", "runner_account", account)
	case p.TeamScoped:
		p.log.Info(p.prefix+": the runner creates sandboxes under other "+p.Name+" credentials than tether's; the drain deletes them once a read with tether's own shows them of its team, and else leaves them live and reports them (give tether a key of the runner's team)", "runner_account", account, "tether_account", p.Account())
	default:
		p.log.Warn(p.prefix+": the runner creates sandboxes under another "+p.Name+" account than tether's; the drain leaves them live and reports them (give tether the same credentials)", "runner_account", account, "tether_account", p.Account())
	}
}

// remember maps a sandbox's id and name, under an account, to its intent,
// for the calls that may follow (a delete, a label replacement, a setter),
// as soon as the create's answer names it: before the runner hears of it,
// and before the id is on disk.
func (p *Proxy) remember(account, name, sandboxID, intentID string) {
	p.mu.Lock()
	if len(p.known) >= maxKnown {
		clear(p.known)
		clear(p.made)
	}
	p.known[account+"\x00"+sandboxID] = intentID
	p.known[account+"\x00"+name] = intentID
	p.made[intentID] = sandboxID
	p.mu.Unlock()
}

// Ours returns the live intent, under account, of the sandbox idOrName
// names, when the sandbox is known to be that intent's: its id was
// answered to a create or journaled. A pending intent with only a matching
// name is not enough: a sandbox of that name may be somebody else's, and
// tether's labels or lifetime rules must never be put on it.
func (p *Proxy) Ours(account, idOrName string) (intent.Intent, bool) {
	id := p.IntentFor(account, idOrName)
	if id == "" {
		return intent.Intent{}, false
	}
	in, err := p.Journal.Get(id)
	if err != nil || !in.Live() {
		return intent.Intent{}, false
	}
	if in.SandboxID == "" {
		p.mu.Lock()
		in.SandboxID = p.made[in.ID]
		p.mu.Unlock()
	}
	return in, in.SandboxID != "" && (in.SandboxID == idOrName || in.Name == idOrName)
}

type deleteKey struct{}

// deletion is a delete of one sandbox on its way.
type deletion struct {
	idOrName, account string
	max               int64 // bound of the answer read for its id
}

// afterPass is the pass-through's hook on an answer: a delete that
// succeeded moves the sandbox's intent to releasing before the runner
// hears of it. The drain then confirms the 404 instead of deleting again.
// The intent is the one that owns the deleted sandbox: when the answer
// names it (Daytona's is the deleted sandbox, sandbox.service.ts:2031-2039)
// by its id, since a name alone could also be a refused create's.
func (p *Proxy) afterPass(resp *http.Response) error {
	if then, ok := resp.Request.Context().Value(thenKey{}).(func(int)); ok {
		then(resp.StatusCode)
	}
	d, _ := resp.Request.Context().Value(deleteKey{}).(*deletion)
	if d == nil || resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil
	}
	answer, err := io.ReadAll(io.LimitReader(resp.Body, d.max+1))
	resp.Body.Close()
	resp.Body = io.NopCloser(io.MultiReader(bytes.NewReader(answer), errReader{err}))
	id, sandboxID := "", ""
	if sid, serr := p.API.SandboxID(answer); err == nil && serr == nil {
		sandboxID = sid
		id = p.IntentFor(d.account, sid)
		if id == "" && sid != d.idOrName {
			id = p.intentOwning(d.account, d.idOrName, sid)
		}
	} else {
		id = p.IntentFor(d.account, d.idOrName)
	}
	if id == "" {
		return nil
	}
	if sandboxID != "" {
		// An intent that never learned its id (its create's answer was
		// lost) learns it now: a provider may rename a deleted sandbox
		// (Daytona does), so only the id confirms the deletion. An id
		// already known stays (journal.ErrObservedOther).
		p.Journal.Observe(id, sandboxID)
	}
	in, err := p.Journal.MarkDeleteRequested(id)
	switch {
	case err == nil:
		p.log.Debug(p.prefix+": the runner deleted its sandbox; the drain only confirms it", "intent", in.ID, "name", in.Name, "sandbox", in.SandboxID)
	case errors.Is(err, journal.ErrIllegalTransition):
		// Released or resolved meanwhile: nothing left to say.
	default:
		p.log.Warn(p.prefix+": could not journal the runner's delete; the drain deletes it", "intent", id, "err", err)
	}
	return nil // the runner gets the provider's answer whatever the journal said
}

// errReader ends a replayed answer with the error its read met, if any.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	return 0, io.EOF
}

// intentOwning is the live intent named name under account whose sandbox
// is, or may be, sandboxID: observed as it, or not observed yet.
func (p *Proxy) intentOwning(account, name, sandboxID string) string {
	live, err := p.Journal.Live()
	if err != nil {
		return ""
	}
	pick := ""
	for _, in := range live {
		if in.Account != account || in.Name != name {
			continue
		}
		if in.SandboxID == sandboxID {
			return in.ID
		}
		if in.SandboxID == "" && pick == "" {
			pick = in.ID
		}
	}
	return pick
}

// IntentFor finds the live intent of a sandbox id or name under account:
// one the proxy journaled, else any live intent (declared over the socket
// or a spool file) with that id, else with that name, one that observed
// its sandbox first.
func (p *Proxy) IntentFor(account, idOrName string) string {
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
	byName := ""
	for _, in := range live {
		switch {
		case in.Account != account:
		case in.SandboxID == idOrName:
			return in.ID
		case in.Name == idOrName && (byName == "" || in.SandboxID != ""):
			byName = in.ID
		}
	}
	return byName
}
