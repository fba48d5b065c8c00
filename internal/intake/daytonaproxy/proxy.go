// Package daytonaproxy is tether's third intake, beside the socket API and
// the spool directory: a Daytona API proxy on loopback. tether points the
// child's DAYTONA_API_URL at it, and every official Daytona SDK reads that
// variable, so a runner that knows nothing of tether is covered
// ("zero-code mode").
//
// It is the Daytona half of the proxy; the provider-neutral half (the
// listener, the streaming pass-through, journal-before-forward of a create
// that survives the runner hanging up, the delete hook) is package
// apiproxy. What is Daytona's is here: the routes, the CreateSandbox body,
// the labels and auto-stop rules, the account of a request's credentials,
// Daytona's error shape and which of its answers create nothing.
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
package daytonaproxy

import (
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tether-run/tether/internal/intake"
	"github.com/tether-run/tether/internal/intake/apiproxy"
	"github.com/tether-run/tether/provider/daytona"
)

// DefaultCreateTimeout bounds one forwarded POST /sandbox, answer read to
// its end. Daytona itself answers within about 30 s (it waits for the
// sandbox to start).
const DefaultCreateTimeout = apiproxy.DefaultCreateTimeout

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
	// Transport makes the upstream calls (default: apiproxy's).
	Transport http.RoundTripper

	CreateTimeout   time.Duration // default DefaultCreateTimeout
	MaxCreateBody   int64         // default apiproxy.DefaultMaxCreateBody (Daytona's own limit is smaller)
	MaxCreateAnswer int64         // default apiproxy.DefaultMaxCreateAnswer

	once    sync.Once
	initErr error
	core    *apiproxy.Proxy
}

func (p *Proxy) init() error {
	p.once.Do(func() {
		if p.Upstream == "" {
			p.Upstream = daytona.DefaultAPIURL
		}
		p.core, p.initErr = apiproxy.New(apiproxy.Config{
			Intake: p.Intake, API: daytonaAPI{}, Name: "Daytona", KeyEnv: daytona.EnvAPIKey,
			Upstream: p.Upstream, Handler: http.HandlerFunc(p.route), Transport: p.Transport,
			CreateTimeout: p.CreateTimeout, MaxCreateBody: p.MaxCreateBody, MaxCreateAnswer: p.MaxCreateAnswer,
		})
		if p.initErr == nil {
			p.Intake = p.core.Intake
		}
	})
	return p.initErr
}

// Listen opens the proxy's listener on addr (loopback; port 0 picks one).
func (p *Proxy) Listen(addr string) (net.Listener, error) {
	if err := p.init(); err != nil {
		return nil, err
	}
	return p.core.Listen(addr)
}

// URL is the API URL the child gets as DAYTONA_API_URL for listener l: the
// proxy's address, the run's secret and the upstream's path (e.g.
// http://127.0.0.1:41234/<secret>/api; apiproxy.Proxy.URL).
func (p *Proxy) URL(l net.Listener) string {
	if p.init() != nil {
		return ""
	}
	return p.core.URL(l)
}

// ShownURL is URL without the secret, for logs and messages.
func (p *Proxy) ShownURL(l net.Listener) string {
	if p.init() != nil {
		return ""
	}
	return p.core.ShownURL(l)
}

// Serve answers requests on l until Close. It returns nil after Close.
func (p *Proxy) Serve(l net.Listener) error {
	if err := p.init(); err != nil {
		return err
	}
	return p.core.Serve(l)
}

// Close stops serving at once (apiproxy.Proxy.Close); creates still
// waiting for Daytona go on, and the drain finds their sandboxes by name.
func (p *Proxy) Close() error {
	if err := p.init(); err != nil {
		return nil
	}
	return p.core.Close()
}

// Actor is the proxy as an oklog/run actor on listener l. The interrupt
// never blocks.
func (p *Proxy) Actor(l net.Listener) (execute func() error, interrupt func(error)) {
	return func() error { return p.Serve(l) },
		func(error) { p.Close() }
}

// ServeHTTP answers one request as the proxy does (refused without the
// run's secret, apiproxy.Proxy.ServeHTTP).
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := p.init(); err != nil {
		writeError(w, http.StatusBadGateway, err.Error())
		return
	}
	p.core.ServeHTTP(w, r)
}

// route sends POST /sandbox to the create, a DELETE of one sandbox to the
// pass-through with the delete hook, and everything else to the
// pass-through.
func (p *Proxy) route(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, p.core.Base()+"/sandbox")
	switch {
	case ok && r.Method == http.MethodPost && (rest == "" || rest == "/"):
		p.create(w, r)
	case ok && r.Method == http.MethodDelete && len(rest) > 1 && rest[0] == '/' && !strings.Contains(rest[1:], "/"):
		p.core.PassDelete(w, r, p.accountOf(r.Header), rest[1:])
	default:
		p.core.Pass(w, r)
	}
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

// daytonaAPI is what apiproxy needs to know of Daytona's API.
type daytonaAPI struct{}

func (daytonaAPI) WriteError(w http.ResponseWriter, code int, msg string) { writeError(w, code, msg) }

func (daytonaAPI) SandboxID(answer []byte) (string, error) { return sandboxID(answer) }

// CreatedNothing: the answers Daytona gives before it does anything at all
// (authentication, permission and quota refusals, rate limits). Any other
// error may follow an allocation (a 400 "failed to start", a 500).
func (daytonaAPI) CreatedNothing(status int) bool {
	return status == http.StatusUnauthorized || status == http.StatusForbidden || status == http.StatusTooManyRequests
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
