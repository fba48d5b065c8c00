// Package dockerproxy is the zero-code intake for Docker: a Docker Engine
// API proxy on a Unix socket of tether's, over the provider-neutral
// apiproxy. tether points the child's DOCKER_HOST at it, which every client
// reads first (docker/cli v28.2.2 cli/command/cli.go:447-449; docker-py
// 7.1.0 docker/utils/utils.py kwargs_from_env; moby client
// client/options.go WithHostFromEnv), so a runner that knows nothing of
// tether is covered, and forwards to the engine the runner would have
// used (docker.FindEngine).
//
// The socket stands in for the engine's, which is root-equivalent: it is
// created mode 0600 in tether's private runtime directory, and a connection
// from any uid but tether's own, root's and the allowed ones is closed at
// accept (SO_PEERCRED), so the proxy never widens who can reach the
// engine. It never listens on TCP.
//
// What is Docker's is here (moby v20.10.24 api/server/router/; the facts
// in docs/fidelity.md), under any /vX.Y prefix, which the engine routes as
// the unversioned path (api/server/server.go:23, 176-178):
//
//   - POST /containers/create (container_routes.go:460-537) is journaled
//     before it is forwarded, with tether's labels (ownership, scope and
//     docker.LabelName, the intent's name) beside the runner's in the
//     body's Labels; labels are the container's for life. The runner's
//     name (?name=) is kept and journaled; without one the engine still
//     picks its own, and the intent's name travels in the label alone.
//     The 201's Id is journaled even if the runner hung up. A 400, 404
//     (no such image: the CLI pulls, then creates again), 409 (name in
//     use) or Podman's 500 of the same meaning closes the intent at once:
//     nothing was created.
//   - POST /networks/create and POST /volumes/create are journaled the
//     same way, as intents named "network:<name>" and "volume:<name>"
//     whose sandboxes are "network:<id>" and "volume:<name>" (an anonymous
//     volume is given a name of tether's). A volume create of a name that
//     exists answers 201 with the existing volume, unchanged
//     (daemon/volumes.go; docker-facts §1.7): its labels, not ours, are
//     what the drain reads, so another's volume is never removed.
//   - DELETE /containers/{id}, /networks/{id} and /volumes/{name} that the
//     engine accepted (204) move the intent to releasing; the drain
//     confirms instead of deleting again. A name or id prefix is resolved
//     to the full id first.
//   - Everything else passes through as it is, streaming both ways:
//     chunked logs, events (no response-header timeout), tar bodies of cp
//     and build, and hijacked attach and exec sessions (101 UPGRADED, then
//     raw bytes with each direction half-closed on its own, which
//     httputil.ReverseProxy does: net/http/httputil/reverseproxy.go
//     switchProtocolCopier at go1.26).
package dockerproxy

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/intake"
	"github.com/tether-run/tether/internal/intake/apiproxy"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/docker"
)

// Proxy is a Docker Engine API proxy that journals the containers,
// networks and volumes created through it.
type Proxy struct {
	// Intake is what the proxy shares with the other intakes: the journal,
	// the scope labels, the provider name (docker.ProviderName) and
	// Account, the engine's fingerprint.
	*intake.Intake
	// Engine is where the runner's client would have gone.
	Engine docker.Engine
	// AllowUIDs may connect besides root and tether's own uid.
	AllowUIDs []int
	// Vouch, when set, is told of each sandbox a create answered (the
	// reaper's Vouch): the drain then deletes it without reading it first.
	Vouch func(intent.Intent, provider.Sandbox) error
	// Transport makes the upstream calls (default: the engine's).
	Transport http.RoundTripper

	CreateTimeout time.Duration // default apiproxy.DefaultCreateTimeout

	core *apiproxy.Proxy
	peer *peerGate
}

func (p *Proxy) build() error {
	if p.core != nil {
		return nil
	}
	if p.Transport == nil {
		p.Transport = p.Engine.Transport()
	}
	core, err := apiproxy.New(apiproxy.Config{
		Intake: p.Intake, API: dockerAPI{}, Name: "Docker", KeyEnv: docker.EnvHost, URLEnv: docker.EnvHost,
		Upstream: p.Engine.URL(), Handler: http.HandlerFunc(p.route), Transport: p.Transport,
		CreateTimeout: p.CreateTimeout, Secretless: true,
	})
	if err != nil {
		return err
	}
	p.core, p.Intake = core, core.Intake
	return nil
}

// Serve answers requests on l until Close. It returns nil after Close.
func (p *Proxy) Serve(l net.Listener) error {
	if err := p.build(); err != nil {
		return err
	}
	return p.core.Serve(l)
}

// Close stops serving at once; creates still waiting for the engine go on
// in the background (apiproxy), and the drain finds their objects by their
// labels.
func (p *Proxy) Close() error {
	if p.core == nil {
		return nil
	}
	return p.core.Close()
}

// Actor is the proxy as an oklog/run actor on listener l. The interrupt
// never blocks.
func (p *Proxy) Actor(l net.Listener) (execute func() error, interrupt func(error)) {
	return func() error { return p.Serve(l) }, func(error) { p.Close() }
}

// ServeHTTP answers one request as the listener does (for tests).
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := p.build(); err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	p.core.ServeHTTP(w, r)
}

// versionPrefix is the engine's API version path prefix (moby v20.10.24
// api/server/server.go:23 "/v{version:[0-9.]+}"; Podman v4.3.1
// pkg/api/server/handler_api.go:65-68 takes letters too).
var versionPrefix = regexp.MustCompile(`^/v[0-9][0-9A-Za-z.-]*(/|$)`)

// Route is a request's path without its API version prefix.
func Route(path string) string {
	if loc := versionPrefix.FindStringIndex(path); loc != nil {
		return "/" + path[loc[1]:]
	}
	return path
}

// route sends the creates and deletes tether journals to their handlers,
// and everything else to the pass-through.
func (p *Proxy) route(w http.ResponseWriter, r *http.Request) {
	rt := Route(r.URL.Path)
	switch r.Method {
	case http.MethodPost:
		switch rt {
		case "/containers/create":
			p.createContainer(w, r)
			return
		case "/networks/create":
			p.createNetwork(w, r)
			return
		case "/volumes/create":
			p.createVolume(w, r)
			return
		}
	case http.MethodDelete:
		kind, rest, ok := strings.Cut(strings.TrimPrefix(rt, "/"), "/")
		if ok && rest != "" && !strings.Contains(rest, "/") {
			switch kind {
			case "containers":
				p.core.PassDelete(w, r, p.Account(), p.resolve(r, "containers", rest))
				return
			case "networks":
				p.core.PassDelete(w, r, p.Account(), docker.KindNetwork+p.resolve(r, "networks", rest))
				return
			case "volumes":
				p.core.PassDelete(w, r, p.Account(), docker.KindVolume+rest)
				return
			}
		}
	}
	p.core.Pass(w, r)
}

// fullID is a container's or network's full id.
var fullID = regexp.MustCompile(`^[0-9a-f]{64}$`)

// resolve turns a container's or network's name or id prefix, as the
// runner's DELETE names it, into its full id, with one read of the engine
// (GET /containers/{ref}/json, /networks/{ref}), so that the delete marks
// the intent that journaled that id. On any failure ref stays as it is:
// the drain then confirms by reads instead.
func (p *Proxy) resolve(r *http.Request, kind, ref string) string {
	if fullID.MatchString(ref) {
		return ref
	}
	path := "/" + kind + "/" + url.PathEscape(ref)
	if kind == "containers" {
		path += "/json"
	}
	ctx, cancel := context.WithTimeout(r.Context(), resolveTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.Engine.URL()+path, nil)
	if err != nil {
		return ref
	}
	resp, err := p.Transport.RoundTrip(req)
	if err != nil {
		return ref
	}
	defer resp.Body.Close()
	var obj struct {
		ID string `json:"Id"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&obj) != nil || !fullID.MatchString(obj.ID) {
		return ref
	}
	return obj.ID
}

// resolveTimeout bounds the read that resolves a delete's name.
const resolveTimeout = 5 * time.Second

// dockerAPI is what apiproxy needs to know of the Engine API.
type dockerAPI struct{}

func (dockerAPI) WriteError(w http.ResponseWriter, code int, msg string) { writeError(w, code, msg) }

var errNoID = errors.New("no Id in the answer")

// SandboxID reads Id from a container create's 201 answer
// ({"Id","Warnings"}, container_routes.go:536).
func (dockerAPI) SandboxID(answer []byte) (string, error) {
	var c struct {
		ID string `json:"Id"`
	}
	if err := json.Unmarshal(answer, &c); err != nil {
		return "", err
	}
	if !fullID.MatchString(c.ID) {
		return "", errNoID
	}
	return c.ID, nil
}

// CreatedNothing: the engine refuses these before it creates anything:
// a body or setting it rejects (400), an image, network driver or plugin
// it does not have (404), a name in use (409), an authorization plugin
// (401, 403).
func (dockerAPI) CreatedNothing(status int) bool {
	switch status {
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusConflict:
		return true
	}
	return false
}

// writeError answers in the engine's error shape {"message"} (moby
// api/server/httpstatus; Podman adds cause and response), which every
// client shows.
func writeError(w http.ResponseWriter, code int, msg string) {
	b, _ := json.Marshal(struct {
		Message string `json:"message"`
	}{msg})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(b)
}
