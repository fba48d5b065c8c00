// Package e2bproxy is the zero-code intake for E2B, a sibling of
// daytonaproxy over the provider-neutral apiproxy: an E2B API proxy on
// loopback. tether points the child's E2B_API_URL at it, and the official
// SDKs read that variable (js-sdk src/connectionConfig.ts:418-421,
// python-sdk e2b/connection_config.py:186), so a runner that knows
// nothing of tether is covered.
//
// What is E2B's is here (e2b-dev/infra packages/api/internal/handlers/,
// the SDK's calls in js-sdk src/sandbox/sandboxApi.ts):
//
//   - POST /sandboxes, the create (sandbox_create.go:64-353; SDK :1689),
//     is journaled before it is forwarded, with tether's metadata added
//     beside the runner's (the metadata is the sandbox's for life,
//     sandbox_create.go:155, 302-306): the ownership and scope labels and
//     tether-name, the key a lost create is found by (E2B sandboxes have
//     no name; the server assigns sandboxID). A create the runner declared
//     itself (its metadata carries an owner) passes with only its timeout
//     capped. The sandboxID of the 201 answer is journaled.
//   - DELETE /sandboxes/{id}, the kill (sandbox_kill.go:39-104; SDK
//     :1210), that E2B accepted (204) moves the sandbox's intent to
//     releasing.
//   - The calls that set a sandbox's timeout have it cut to MaxTimeout
//     (and the end asked for told to Capped, which renews it while the
//     runner lives): POST /sandboxes/{id}/timeout (sandbox_timeout.go:
//     17-60; SDK :1403), /connect (sandbox_connect.go:25-182; SDK :1794),
//     /resume (sandbox_resume.go:30-181) and /refreshes' duration
//     (sandbox_refresh.go:18-65).
//   - Everything else passes through as it is, streaming: its headers (the
//     runner's X-API-Key included), E2B's status, headers and body. The
//     key is never journaled or logged; only its fingerprint is, as the
//     intent's account.
//
// E2B has no call that replaces a sandbox's metadata (spec/openapi.yml:
// the sandbox routes are create, get, kill, pause, resume, connect, fork,
// timeout, refreshes, network, snapshots, logs, metrics), so tether's keys
// stay as the create set them; a resume keeps them too (the snapshot's
// metadata, sandbox_resume.go:339).
//
// A fork of a sandbox of ours (POST /sandboxes/{id}/fork,
// sandbox_fork.go:37-186; SDK :1729) is journaled before it is forwarded,
// as one intent per fork of its count, each with its parent's name and
// intent (fork.go): each fork carries its parent's metadata, tether's keys
// included.
package e2bproxy

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
	"github.com/tether-run/tether/provider/e2b"
)

// headerAPIKey is E2B's authentication header (infra
// packages/auth/pkg/auth/consts.go:5; js-sdk src/api/index.ts:118).
const headerAPIKey = "X-API-Key"

// Proxy is an E2B API proxy that journals the sandboxes created through it.
type Proxy struct {
	// Intake is what the proxy shares with the other intakes: the journal,
	// the scope labels, the provider name (e2b.ProviderName) and Account,
	// the fingerprint of tether's own E2B credentials.
	*intake.Intake
	// Upstream is the real E2B API URL.
	Upstream string
	// MaxTimeout caps the timeout of every sandbox created, resumed or
	// connected through the proxy, and of every timeout the runner sets;
	// 0 leaves them as sent.
	MaxTimeout time.Duration
	// Capped, when set, is told of each intent whose sandbox's timeout was
	// cut, and the end the runner asked for: the sidecar renews the
	// sandbox up to it while the runner lives.
	Capped func(intentID string, askedEnd time.Time)
	// Vouch, when set, is told of each sandbox a create or fork answered
	// (the reaper's Vouch): the drain then kills it without reading it
	// first. E2B's answer carries no metadata, so what is vouched for is
	// the metadata the proxy itself sent in that very call, which E2B
	// stores as sent (handlers/sandbox_create.go:155, 302-306).
	Vouch func(intent.Intent, provider.Sandbox) error
	// Transport makes the upstream calls (default: apiproxy's).
	Transport http.RoundTripper

	CreateTimeout time.Duration // default apiproxy.DefaultCreateTimeout

	// Endpoint is the listener's side (URL, ShownURL, Serve, Close, Actor),
	// built by Listen.
	apiproxy.Endpoint
	core *apiproxy.Proxy
}

// Listen builds the proxy from its settings, the first time only, and
// opens its listener on addr (loopback; port 0 picks one). The child's
// E2B_API_URL is URL(l); it carries the run's secret.
func (p *Proxy) Listen(addr string) (net.Listener, error) { return p.Open(addr, p.build) }

func (p *Proxy) build() (*apiproxy.Proxy, error) {
	core, err := apiproxy.New(apiproxy.Config{
		Intake: p.Intake, API: e2bAPI{}, Name: "E2B", KeyEnv: e2b.EnvAPIKey, URLEnv: e2b.EnvAPIURL,
		Upstream: p.Upstream, Handler: http.HandlerFunc(p.route), Transport: p.Transport,
		CreateTimeout: p.CreateTimeout,
	})
	if err != nil {
		return nil, err
	}
	p.core, p.Intake = core, core.Intake
	return core, nil
}

// route sends POST /sandboxes to the create, DELETE /sandboxes/{id} to
// the pass-through with the delete hook, the timeout-setting calls to the
// cap, and everything else to the pass-through.
func (p *Proxy) route(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, p.core.Base()+"/sandboxes")
	if !ok {
		p.core.Pass(w, r)
		return
	}
	id, action, _ := strings.Cut(strings.TrimPrefix(rest, "/"), "/")
	switch {
	case r.Method == http.MethodPost && (rest == "" || rest == "/"):
		p.create(w, r)
	case r.Method == http.MethodDelete && strings.HasPrefix(rest, "/") && id != "" && action == "":
		p.core.PassDelete(w, r, p.accountOf(r.Header), id)
	case r.Method == http.MethodPost && id != "" && p.MaxTimeout > 0 &&
		(action == "timeout" || action == "connect" || action == "resume"):
		p.capTimeout(w, r, id, fieldTimeout)
	case r.Method == http.MethodPost && id != "" && action == "fork":
		p.fork(w, r, id)
	case r.Method == http.MethodPost && id != "" && p.MaxTimeout > 0 && action == "refreshes":
		p.capTimeout(w, r, id, fieldDuration)
	default:
		p.core.Pass(w, r)
	}
}

// accountOf is the fingerprint of the key a request carries, computed as
// tether's provider computes its own, or "" without one.
func (p *Proxy) accountOf(h http.Header) string {
	key := h.Get(headerAPIKey)
	if key == "" {
		return ""
	}
	return e2b.Fingerprint(p.Upstream, key)
}

// e2bAPI is what apiproxy needs to know of E2B's API.
type e2bAPI struct{}

func (e2bAPI) WriteError(w http.ResponseWriter, code int, msg string) { writeError(w, code, msg) }

// SandboxID reads sandboxID from a create's answer (spec Sandbox schema;
// handlers/sandbox_create.go answers 201 with it).
func (e2bAPI) SandboxID(answer []byte) (string, error) {
	var sb struct {
		SandboxID string `json:"sandboxID"`
	}
	if err := json.Unmarshal(answer, &sb); err != nil {
		return "", err
	}
	if sb.SandboxID == "" {
		return "", errNoID
	}
	return sb.SandboxID, nil
}

// CreatedNothing: E2B refuses these before it reserves anything — a body
// it cannot parse or a timeout out of bounds (400,
// handlers/sandbox_create.go:76-83, timeout_helper.go:18-39), the key
// (401/403, packages/auth/.../service.go:99-127), the rate limit and the
// team's concurrency (429, middleware/ratelimit, orchestrator/
// create_instance.go:188-204, checked before the reservation at :192).
func (e2bAPI) CreatedNothing(status int) bool {
	switch status {
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusTooManyRequests:
		return true
	}
	return false
}

// writeError answers in E2B's error shape {code, message}
// (packages/shared/pkg/apierrors/apierrors.go:26-41).
func writeError(w http.ResponseWriter, code int, msg string) {
	b, _ := json.Marshal(struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{code, msg})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(b)
}
