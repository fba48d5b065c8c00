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
//   - The calls that set the timeout of a sandbox of ours have it cut to
//     MaxTimeout, and the end the runner asked for told to Asked, which
//     renews it while the runner lives, never past that end: POST
//     /sandboxes/{id}/timeout (sandbox_timeout.go:17-60, which may
//     shorten; SDK :1403), /connect (sandbox_connect.go:25-182, which only
//     lengthens a running sandbox and resumes a paused one; SDK :1794),
//     /resume (sandbox_resume.go:30-181) and /refreshes' duration
//     (sandbox_refresh.go:18-65, which only lengthens); a pause ends its
//     renewals. The same calls on a sandbox tether does not own (a
//     workspace the runner reattaches to) pass untouched: neither cut nor
//     renewed.
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
// Every fork (POST /sandboxes/{id}/fork, sandbox_fork.go:37-186; SDK
// :1729) is journaled before it is forwarded, as one intent per fork of
// its count (fork.go): each fork carries its parent's metadata, so a fork
// of a sandbox of ours is proved ours by it, with its parent's name and
// intent, and a fork of any other sandbox, a new sandbox this runner made
// that carries none of tether's, by the id the answer names (witnessed).
//
// The credentials a request carries name its account: an API key
// (X-API-Key, tried first), else the team of an auth provider's token
// (Authorization: Bearer with X-Team-ID; spec/openapi.yml:10-42). Every
// credential of a team acts for the team: the drain proves another
// credential of tether's team with one read (reaper.Reaper.checkAccount).
package e2bproxy

import (
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/intake"
	"github.com/tether-run/tether/internal/intake/apiproxy"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/e2b"
)

// E2B's authentication headers (infra packages/auth/pkg/auth/consts.go:
// 5-7; js-sdk src/api/index.ts:118).
const (
	headerAPIKey = "X-API-Key"
	headerTeamID = "X-Team-ID"
)

// Proxy is an E2B API proxy that journals the sandboxes created through it.
type Proxy struct {
	// Intake is what the proxy shares with the other intakes: the journal,
	// the scope labels, the provider name (e2b.ProviderName) and Account,
	// the fingerprint of tether's own E2B credentials.
	*intake.Intake
	// Upstream is the real E2B API URL.
	Upstream string
	// MaxTimeout caps the timeout of every sandbox of ours created,
	// forked, resumed or connected through the proxy, and of every timeout
	// the runner sets on one; 0 leaves them as sent.
	MaxTimeout time.Duration
	// Asked, when set, is told of the end the runner asked for a sandbox of
	// ours, each time one of its calls sets it: exact (a create, a fork,
	// /timeout, a resume; a pause, which ends it now), or only a lengthening
	// (/connect of a running sandbox, /refreshes). The sidecar renews a
	// sandbox whose asked end is past MaxTimeout up to that end, never
	// past it.
	Asked func(intentID string, end time.Time, exact bool)
	// Deleted, when set, is told of the runner's delete of a sandbox of
	// ours before it is forwarded, and whether a restore of it may be in
	// flight (a resume or connect of it through the proxy not yet
	// answered, or a sandbox made with auto-resume, which traffic alone
	// resumes): E2B answers such a delete 204 and the restore brings the
	// sandbox back (infra#3636), so the drain confirms it only after its
	// restore window (reaper.Reaper.NoteDeleted).
	Deleted func(intentID string, restoring bool)
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

	mu             sync.Mutex
	restoring      map[string]int    // sandbox id → resumes and connects of it in flight
	resumes        map[string]uint64 // sandbox id → resumes and connects of it begun (ever)
	autoResume     map[string]bool   // intent id → made with auto-resume
	autoResumeFull bool              // autoResume reached its bound
}

// Listen builds the proxy from its settings, the first time only, and
// opens its listener on addr (loopback; port 0 picks one). The child's
// E2B_API_URL is URL(l); it carries the run's secret.
func (p *Proxy) Listen(addr string) (net.Listener, error) { return p.Open(addr, p.build) }

func (p *Proxy) build() (*apiproxy.Proxy, error) {
	core, err := apiproxy.New(apiproxy.Config{
		Intake: p.Intake, API: e2bAPI{}, Name: "E2B", KeyEnv: e2b.EnvAPIKey, URLEnv: e2b.EnvAPIURL,
		Upstream: p.Upstream, Handler: http.HandlerFunc(p.route), Transport: p.Transport,
		CreateTimeout: p.CreateTimeout, TeamScoped: true,
	})
	if err != nil {
		return nil, err
	}
	p.core, p.Intake = core, core.Intake
	return core, nil
}

// route sends POST /sandboxes to the create, a fork to the fork,
// DELETE /sandboxes/{id} to the pass-through with the delete hook, the
// timeout-setting calls and the pause to timed, and everything else to
// the pass-through.
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
		p.kill(w, r, id)
	case r.Method == http.MethodPost && id != "" && action == "fork":
		p.fork(w, r, id)
	case r.Method == http.MethodPost && id != "" && (action == "resume" || action == "connect"):
		// Counted from its arrival, before anything else: a kill of the
		// sandbox meanwhile may race the restore it starts (kill).
		defer p.resumeBegins(id)()
		p.timed(w, r, id, action)
	case r.Method == http.MethodPost && id != "" && timedActions[action] != "":
		p.timed(w, r, id, action)
	default:
		p.core.Pass(w, r)
	}
}

// accountOf is the fingerprint of the credentials a request carries,
// computed as tether's provider computes its own: the API key, which the
// server tries first, else the team an auth provider's token acts in
// (X-Team-ID), or "" without either.
func (p *Proxy) accountOf(h http.Header) string {
	if key := h.Get(headerAPIKey); key != "" {
		return e2b.Fingerprint(p.Upstream, key)
	}
	if token, ok := strings.CutPrefix(h.Get("Authorization"), "Bearer "); ok && strings.TrimSpace(token) != "" {
		if team := h.Get(headerTeamID); team != "" {
			return e2b.TeamFingerprint(p.Upstream, team)
		}
	}
	return ""
}

// kill serves DELETE /sandboxes/{id}: the runner's kill. An answer of 204
// moves its intent to releasing (apiproxy.PassDelete); of a sandbox of
// ours, Deleted is told, before the runner hears the answer, whether a
// restore of it may have raced the kill: a resume or connect of it through
// the proxy under way at any moment from the kill's arrival to its answer
// (their order at E2B is not theirs here), or a sandbox traffic alone
// resumes (auto-resume). A kill that got no answer tells nothing: the
// drain then takes no 404 of it without its restore window.
func (p *Proxy) kill(w http.ResponseWriter, r *http.Request, id string) {
	account := p.accountOf(r.Header)
	if in := p.core.IntentFor(account, id); in != "" && p.Deleted != nil {
		p.mu.Lock()
		before, under := p.resumes[id], p.restoring[id] > 0
		p.mu.Unlock()
		r = apiproxy.Then(r, func(status int) {
			if status/100 != 2 {
				return
			}
			p.mu.Lock()
			raced := under || p.resumes[id] != before
			p.mu.Unlock()
			p.Deleted(in, raced || p.mayRestore(id, in))
		})
	}
	p.core.PassDelete(w, r, account, id)
}

// resumeBegins counts a resume or connect of sandbox id arriving, and
// returns what counts it done.
func (p *Proxy) resumeBegins(id string) (done func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.restoring == nil {
		p.restoring, p.resumes = map[string]int{}, map[string]uint64{}
	}
	if len(p.resumes) >= maxRemembered {
		clear(p.resumes) // a kill under way then sees a change: it is taken as raced
	}
	p.restoring[id]++
	p.resumes[id]++
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.restoring[id]--; p.restoring[id] <= 0 {
			delete(p.restoring, id)
		}
	}
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
