// Package daytonaproxy is the zero-code intake for Daytona, beside the
// socket API and the spool directory: a Daytona API proxy on loopback. tether points the
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
// It routes as Daytona's router does (route.go) and takes apart the calls
// that make a sandbox or could undo what tether set on one:
//   - POST /sandbox and POST /sandbox/{id}/fork are journaled first
//     (apiproxy); the sandbox is named tether-<id> unless the runner named
//     it (then that name is journaled: it is what finds a lost create);
//     the ownership and scope labels are added beside the runner's own;
//     the intervals are ruled (intervals: a disabled auto-stop becomes the
//     backstop, lease mode sets its own); the answer, Daytona's own read
//     of the sandbox, vouches for it to the drain. A fork also remembers
//     its parent's intent, so the drain deletes it first, and gets its own
//     labels. A create that names a live intent of this journal (declared
//     over the socket or a spool file) goes through untouched: the runner
//     answers for it as before. Answers given before anything is stored
//     (409 for a name taken among them) close the intent at once.
//   - PUT /sandbox/{id}/labels, a full replacement, and the interval
//     setters, for a sandbox of this tether: tether's labels go back into
//     the replacement, the setters follow the create's interval rule.
//   - A DELETE /sandbox/{idOrName} that succeeds moves the intent owning
//     the deleted sandbox to releasing: the drain then only confirms.
//
// Everything else passes through as it is, streaming: any method and path,
// websocket upgrades, the runner's headers (its Authorization and
// X-Daytona-* included), and Daytona's status, headers and body. An error
// stays an error, and a Daytona that cannot be reached is a connection
// error, as without tether. Credentials go from the runner to Daytona
// untouched and are never journaled or logged; only their fingerprint is,
// as the intent's account, and an account other than tether's own is
// reported.
package daytonaproxy

import (
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/intake"
	"github.com/tether-run/tether/internal/intake/apiproxy"
	"github.com/tether-run/tether/provider"
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
	// every create gets, with an auto-delete of at most as many (lease.go); 0: off.
	LeaseMinutes int
	// Vouch, if set, is told of each sandbox a create or fork answer
	// showed (the reaper's Vouch): Daytona's own read of the sandbox, so
	// the drain's first read is not needed to prove it ours.
	Vouch func(in intent.Intent, sb provider.Sandbox) error
	// Transport makes the upstream calls (default: apiproxy's).
	Transport http.RoundTripper

	CreateTimeout   time.Duration // default DefaultCreateTimeout
	MaxCreateBody   int64         // default apiproxy.DefaultMaxCreateBody (Daytona's own limit is smaller)
	MaxCreateAnswer int64         // default apiproxy.DefaultMaxCreateAnswer

	// Endpoint is the listener's side (URL, ShownURL, Serve, Close, Actor),
	// built by Listen.
	apiproxy.Endpoint
	core *apiproxy.Proxy
}

// Listen builds the proxy from its settings, the first time only, and
// opens its listener on addr (loopback; port 0 picks one). The child's
// DAYTONA_API_URL is URL(l): the proxy's address, the run's secret and the
// upstream's path (e.g. http://127.0.0.1:41234/<secret>/api).
func (p *Proxy) Listen(addr string) (net.Listener, error) { return p.Open(addr, p.build) }

func (p *Proxy) build() (*apiproxy.Proxy, error) {
	if p.Upstream == "" {
		p.Upstream = daytona.DefaultAPIURL
	}
	core, err := apiproxy.New(apiproxy.Config{
		Intake: p.Intake, API: daytonaAPI{}, Name: "Daytona", KeyEnv: daytona.EnvAPIKey, URLEnv: daytona.EnvAPIURL,
		Upstream: p.Upstream, Handler: http.HandlerFunc(p.route), Transport: p.Transport,
		CreateTimeout: p.CreateTimeout, MaxCreateBody: p.MaxCreateBody, MaxCreateAnswer: p.MaxCreateAnswer,
	})
	if err != nil {
		return nil, err
	}
	p.core, p.Intake = core, core.Intake
	return core, nil
}

// route routes, as Daytona's router would (classify), a create and a
// fork to be journaled, a label replacement and an interval setter of one
// of this tether's sandboxes to be ruled, a DELETE of one sandbox to the
// pass-through with the delete hook, and everything else to the
// pass-through.
func (p *Proxy) route(w http.ResponseWriter, r *http.Request) {
	rt := p.classify(r)
	switch rt.kind {
	case routeCreate:
		p.create(w, r, rt)
	case routeFork:
		p.fork(w, r, rt)
	case routeLabels:
		if p.replaceLabels(w, r, rt) {
			p.core.Pass(w, r)
		}
	case routeSetter:
		p.setter(r, rt)
		p.core.Pass(w, r)
	case routeDelete:
		setPath(r, rt.path)
		p.core.PassDelete(w, r, p.accountOf(r.Header), rt.idOrName)
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
	if org == "" || byKey == p.Account() {
		return byKey
	}
	return daytona.Fingerprint(p.Upstream, "organization:"+org)
}

// daytonaAPI is what apiproxy needs to know of Daytona's API.
type daytonaAPI struct{}

func (daytonaAPI) WriteError(w http.ResponseWriter, code int, msg string) { writeError(w, code, msg) }

func (daytonaAPI) SandboxID(answer []byte) (string, error) {
	sb, err := decodeSandbox(answer)
	return sb.ID, err
}

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
