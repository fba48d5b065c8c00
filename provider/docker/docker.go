// Package docker is tether's Provider for local container sandboxes: the
// Docker Engine API (Docker, and Podman's Docker-compatible service) over
// its Unix socket, or TCP with TLS. A container is a sandbox; so are the
// networks and volumes a runner creates beside its containers.
//
// It is a small client of its own over net/http rather than the moby
// client module: tether makes a dozen calls whose answers it must read as
// the engine wrote them (Podman's 500s that mean 404 or 409, a 409 that
// means a removal is already under way), the proxy beside it speaks raw
// HTTP anyway, and the moby client (github.com/moby/moby/client v0.6.3)
// refuses engines older than API 1.40 and would bring its API types and
// their dependencies into the binary. Calls use unversioned paths, which
// every engine serves at its own current version (moby v20.10.24
// api/server/server.go:176-178; Podman v4.3.1 pkg/api/server/
// handler_api.go:65-68).
//
// Names and kinds. A sandbox is named by the label LabelName (tether's
// name for it, "tether-name", as E2B's metadata carries it), else by the
// container's own name: the proxy leaves a container the engine's random
// name when the runner gives none, and labels are a container's for life
// (moby v20.10.24 api/types/container/host_config.go:382-386: update takes
// no labels). Networks and volumes are sandboxes whose ids and names carry
// their kind, "network:<id>" and "volume:<name>" (no container id or name
// holds a colon), so one provider resolves all three and the intent
// vocabulary stays as it is.
//
// Owner and gone. Ownership is proved by tether's labels, read from the
// engine. The account is the engine's address (Decision in
// docs/ARCHITECTURE.md): Docker's /info ID is a key file's (20.10) or a
// data root's (23+), Podman's a new random UUID on every call
// (pkg/api/handlers/compat/info.go:80 at v4.3.1), while the address is what
// the runner was pointed at and is known without a call, so a drain after a
// reboot recognises its engine. A 404 on a container id is final: ids are
// 256 random bits never reused, and the engine has no access guard.
// Deletes are synchronous (provider.SyncDeleter): DELETE
// /containers/{id}?force=1&v=1 kills and removes, anonymous volumes
// included, before it answers.
package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/internal/apicall"
)

// ProviderName is the provider's name as journaled with each intent.
const ProviderName = "docker"

// LabelName is the label that carries tether's name for a container,
// network or volume: what a create whose answer was lost is found by.
const LabelName = "tether-name"

// Kind prefixes of the ids and names of networks and volumes.
const (
	KindNetwork = "network:"
	KindVolume  = "volume:"
)

const (
	// DefaultCallTimeout bounds each call when Config.CallTimeout is zero.
	DefaultCallTimeout = 10 * time.Second
	// StopTimeout is how long a stop (on_drain stop) lets the container's
	// process end after SIGTERM before the engine kills it (POST
	// /containers/{id}/stop?t=): short, inside the drain's deadline.
	StopTimeout = 2 * time.Second
	// RemoveTimeout bounds a delete (and a stop): a force-remove kills the
	// container and waits until it is removed, which takes seconds when
	// dozens go at once (measured: 64 in parallel, 3 to 10 s each on a
	// busy 2-core host). The drain's deadline bounds it too.
	RemoveTimeout = 30 * time.Second
	maxBody       = 16 << 20
	maxErrorMsg   = 300
)

// Config says how to reach one engine.
type Config struct {
	Engine      Engine
	CallTimeout time.Duration // DefaultCallTimeout if zero
	Logger      *slog.Logger  // slog.Default() if nil
	// Turns: whether removals leave their networks one at a time
	// (turns.go); TurnsAuto asks the engine's version.
	Turns Turns
}

// Provider is one Docker engine. It is safe for concurrent use.
type Provider struct {
	engine  Engine
	base    string
	account string
	timeout time.Duration
	hc      *http.Client
	log     *slog.Logger

	turns     Turns
	turnState atomic.Int32  // turnUnknown, turnYes, turnNo
	turn      chan struct{} // the engine-wide turn to leave networks
}

var (
	_ provider.Provider    = (*Provider)(nil)
	_ provider.Checker     = (*Provider)(nil)
	_ provider.Account     = (*Provider)(nil)
	_ provider.SyncDeleter = (*Provider)(nil)
	_ provider.CallTimer   = (*Provider)(nil)
)

// CallTimeout: a delete or stop may take RemoveTimeout (or the provider's
// own call timeout, if longer); other calls have no bound of their own.
func (p *Provider) CallTimeout(kind string) time.Duration {
	if kind == provider.CallDelete || kind == provider.CallStop {
		return max(RemoveTimeout, p.timeout)
	}
	return 0
}

// New returns a Provider of cfg's engine. It makes no call.
func New(cfg Config) (*Provider, error) {
	if cfg.Engine.Network == "" || cfg.Engine.Address == "" {
		return nil, errors.New("docker: no engine")
	}
	if cfg.CallTimeout < 0 {
		return nil, fmt.Errorf("docker call timeout %s: must not be negative", cfg.CallTimeout)
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Provider{
		engine:  cfg.Engine,
		base:    cfg.Engine.URL(),
		account: Account(cfg.Engine),
		timeout: cfg.CallTimeout,
		hc: &http.Client{
			Transport:     cfg.Engine.Transport(),
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		log:   log,
		turns: cfg.Turns,
		turn:  make(chan struct{}, 1),
	}, nil
}

// Account names an engine by its address (Engine.Host: the socket path, or
// the TCP host and port): the same for every run pointed at it, whatever
// the engine says of itself.
func Account(e Engine) string { return provider.Fingerprint(ProviderName, e.Host, "") }

// Name is ProviderName.
func (p *Provider) Name() string { return ProviderName }

// Account is the engine's fingerprint (see Account).
func (p *Provider) Account() string { return p.account }

// Engine is the engine the provider calls.
func (p *Provider) Engine() Engine { return p.engine }

// DeletesSynchronously: the engine has killed and removed a container (and
// a network or volume is gone) when it answers the delete.
func (p *Provider) DeletesSynchronously() bool { return true }

// kindOf splits a sandbox id or name into its kind prefix and the engine's
// own id or name.
func kindOf(s string) (kind, rest string) {
	for _, k := range []string{KindNetwork, KindVolume} {
		if r, ok := strings.CutPrefix(s, k); ok {
			return k, r
		}
	}
	return "", s
}

// Container, network and volume references as the engine takes them
// (moby v20.10.24 daemon/names/names.go:9 for names; ids are 64 hex).
var (
	fullID  = regexp.MustCompile(`^[0-9a-f]{64}$`)
	refName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)
)

// checkRef refuses what no engine object can be called by (it goes into a
// path). It is not found: nothing has it.
func checkRef(op, ref string) error {
	if ref == "" || len(ref) > 255 || !refName.MatchString(ref) {
		return fmt.Errorf("docker %s %q: %w", op, clip(ref), provider.ErrNotFound)
	}
	return nil
}

// Get reads one container, network ("network:<id>") or volume
// ("volume:<name>"). ErrNotFound when the engine has none.
func (p *Provider) Get(ctx context.Context, id string) (provider.Sandbox, error) {
	l, err := p.Inspect(ctx, id)
	return l.Sandbox, err
}

// Inspect is Get with the sandbox's last activity (provider.Account).
func (p *Provider) Inspect(ctx context.Context, id string) (provider.Listed, error) {
	kind, ref := kindOf(id)
	if err := checkRef("get", ref); err != nil {
		return provider.Listed{}, err
	}
	now := time.Now()
	switch kind {
	case KindNetwork:
		var n networkJSON
		if err := p.call(ctx, "get", id, http.MethodGet, "/networks/"+ref, nil, nil, &n, http.StatusOK); err != nil {
			return provider.Listed{}, err
		}
		return n.listed(now), nil
	case KindVolume:
		var v volumeJSON
		if err := p.call(ctx, "get", id, http.MethodGet, "/volumes/"+ref, nil, nil, &v, http.StatusOK); err != nil {
			return provider.Listed{}, err
		}
		inUse, err := p.volumeInUse(ctx, v.Name)
		if err != nil {
			return provider.Listed{}, err
		}
		return v.listed(now, inUse), nil
	}
	var c containerJSON
	if err := p.call(ctx, "get", id, http.MethodGet, "/containers/"+ref+"/json", nil, nil, &c, http.StatusOK); err != nil {
		return provider.Listed{}, err
	}
	return c.listed(now), nil
}

// GetByName finds the sandbox tether names name: the one labelled
// LabelName=name, else the one whose own name is name (a runner that
// declared its container over the socket names it so itself). A network's
// or volume's name carries its kind. ErrNotFound when there is none.
func (p *Provider) GetByName(ctx context.Context, name string) (provider.Sandbox, error) {
	kind, ref := kindOf(name)
	if checkRef("get by name", ref) != nil && kind != "" {
		return provider.Sandbox{}, fmt.Errorf("docker get by name %q: %w", clip(name), provider.ErrNotFound)
	}
	items, err := p.listKind(ctx, kind, map[string]string{LabelName: name})
	if err != nil {
		return provider.Sandbox{}, err
	}
	if len(items) > 0 {
		sort.Slice(items, func(a, b int) bool { return items[a].CreatedAt.Before(items[b].CreatedAt) })
		if len(items) > 1 {
			p.log.Debug("docker: several objects carry one name; taking the oldest", "name", name, "count", len(items))
		}
		return items[0], nil
	}
	if checkRef("get by name", ref) != nil {
		return provider.Sandbox{}, fmt.Errorf("docker get by name %q: %w", clip(name), provider.ErrNotFound)
	}
	// By the object's own name. The engine resolves a container path by
	// full id, then name, then id prefix (moby v20.10.24
	// daemon/container.go:32-63), so only an exact name is taken.
	var sb provider.Sandbox
	switch kind {
	case KindVolume:
		sb, err = p.Get(ctx, name) // volumes are found by their exact name only
	case KindNetwork:
		var nets []networkJSON
		q := url.Values{"filters": {filterJSON(map[string][]string{"name": {ref}})}}
		if err = p.call(ctx, "get by name", name, http.MethodGet, "/networks", q, nil, &nets, http.StatusOK); err == nil {
			err = fmt.Errorf("docker get by name %s: %w", name, provider.ErrNotFound)
			for _, n := range nets {
				if n.Name == ref {
					sb, err = n.listed(time.Now()).Sandbox, nil
					break
				}
			}
		}
	default:
		var c containerJSON
		if err = p.call(ctx, "get by name", name, http.MethodGet, "/containers/"+ref+"/json", nil, nil, &c, http.StatusOK); err == nil {
			if strings.TrimPrefix(c.Name, "/") != ref {
				return provider.Sandbox{}, fmt.Errorf("docker get by name %s: the engine answered with %s: %w", name, c.ID, provider.ErrNotFound)
			}
			sb = c.listed(time.Now()).Sandbox
		}
	}
	if err != nil {
		return provider.Sandbox{}, err
	}
	if sb.Name != name {
		// Labelled with another tether name: not the one asked for.
		return provider.Sandbox{}, fmt.Errorf("docker get by name %s: %s is named %q by its label: %w", name, sb.ID, sb.Name, provider.ErrNotFound)
	}
	return sb, nil
}

// List returns the containers, networks and volumes whose labels include
// every given pair.
func (p *Provider) List(ctx context.Context, labels map[string]string) ([]provider.Sandbox, error) {
	var out []provider.Sandbox
	for _, kind := range []string{"", KindNetwork, KindVolume} {
		items, err := p.listKind(ctx, kind, labels)
		if err != nil {
			return nil, err
		}
		out = append(out, items...)
	}
	return out, nil
}

// listKind lists one kind of object by labels (every pair must match:
// the engine ANDs label filters, moby v20.10.24
// api/types/filters/parse.go:152-177).
func (p *Provider) listKind(ctx context.Context, kind string, labels map[string]string) ([]provider.Sandbox, error) {
	page, err := p.listPage(ctx, kind, labels, false)
	if err != nil {
		return nil, err
	}
	out := make([]provider.Sandbox, len(page))
	for i := range page {
		out[i] = page[i].Sandbox
	}
	return out, nil
}

// labelFilter is the filters query value for labels (the list form, which
// every engine takes: parse.go:85-106; Podman honours it too).
func labelFilter(labels map[string]string, keys ...string) string {
	var vals []string
	for k, v := range labels {
		vals = append(vals, k+"="+v)
	}
	vals = append(vals, keys...)
	sort.Strings(vals)
	return filterJSON(map[string][]string{"label": vals})
}

func filterJSON(f map[string][]string) string {
	b, _ := json.Marshal(f)
	return string(b)
}

// listPage lists one kind; with activity, a stopped container is read for
// its FinishedAt and a volume for the containers that use it.
func (p *Provider) listPage(ctx context.Context, kind string, labels map[string]string, activity bool, keys ...string) ([]provider.Listed, error) {
	q := url.Values{"filters": {labelFilter(labels, keys...)}}
	now := time.Now()
	var out []provider.Listed
	switch kind {
	case KindNetwork:
		var nets []networkJSON
		if err := p.call(ctx, "list", "", http.MethodGet, "/networks", q, nil, &nets, http.StatusOK); err != nil {
			return nil, err
		}
		for _, n := range nets {
			l := n.listed(now)
			if activity {
				// The list leaves Containers empty; a read fills it.
				if full, err := p.Inspect(ctx, l.ID); err == nil {
					l = full
				} else if !errors.Is(err, provider.ErrNotFound) {
					return nil, err
				}
			}
			out = append(out, l)
		}
	case KindVolume:
		var vols struct {
			Volumes []volumeJSON `json:"Volumes"`
		}
		if err := p.call(ctx, "list", "", http.MethodGet, "/volumes", q, nil, &vols, http.StatusOK); err != nil {
			return nil, err
		}
		for _, v := range vols.Volumes {
			inUse := false
			if activity {
				var err error
				if inUse, err = p.volumeInUse(ctx, v.Name); err != nil {
					return nil, err
				}
			}
			out = append(out, v.listed(now, inUse))
		}
	default:
		q.Set("all", "1")
		var items []listItemJSON
		if err := p.call(ctx, "list", "", http.MethodGet, "/containers/json", q, nil, &items, http.StatusOK); err != nil {
			return nil, err
		}
		for _, it := range items {
			l := it.listed(now)
			if activity && l.State != provider.StateStarted {
				full, err := p.Inspect(ctx, l.ID)
				if errors.Is(err, provider.ErrNotFound) {
					continue // removed since the list
				}
				if err != nil {
					return nil, err
				}
				l = full
			}
			out = append(out, l)
		}
	}
	return out, nil
}

// volumeInUse reports whether any container mounts the volume.
func (p *Provider) volumeInUse(ctx context.Context, name string) (bool, error) {
	q := url.Values{"all": {"1"}, "filters": {filterJSON(map[string][]string{"volume": {name}})}}
	var items []listItemJSON
	if err := p.call(ctx, "list", KindVolume+name, http.MethodGet, "/containers/json", q, nil, &items, http.StatusOK); err != nil {
		return false, err
	}
	return len(items) > 0, nil
}

// Sweep pages: containers first, then networks, then volumes (those are
// removed once their containers are).
const (
	cursorNetworks = "networks"
	cursorVolumes  = "volumes"
)

// ListPage lists one kind of object per page, containers, networks, then
// volumes, each with its last activity: now for a running container, a
// network with containers attached or a volume in use; else when the
// container last exited, or the object was created. Only objects with a
// tether-owner label are listed (a sweep looks at no other).
func (p *Provider) ListPage(ctx context.Context, q provider.AccountQuery, cursor string) ([]provider.Listed, string, error) {
	var kind, next string
	switch cursor {
	case "":
		kind, next = "", cursorNetworks
	case cursorNetworks:
		kind, next = KindNetwork, cursorVolumes
	case cursorVolumes:
		kind, next = KindVolume, ""
	default:
		return nil, "", fmt.Errorf("docker list: unknown cursor %q", clip(cursor))
	}
	var keys []string
	if _, ok := q.Labels["tether-owner"]; !ok {
		keys = []string{"tether-owner"}
	}
	page, err := p.listPage(ctx, kind, q.Labels, true, keys...)
	return page, next, err
}

// Delete removes the sandbox: a container killed and removed with its
// anonymous volumes (DELETE /containers/{id}?force=1&v=1, moby v20.10.24
// api/server/router/container/container_routes.go:539-558), a network or
// a volume removed. Only a full container or network id is taken: the
// engine would resolve anything else by name or prefix first. A removal
// already under way (409 "removal of container X is already in progress",
// daemon/delete.go:31-33: --rm's own, or a concurrent delete) is taken as
// accepted: the read that follows confirms it. A network with containers
// attached, or a volume one mounts, answers provider.ErrInUse.
func (p *Provider) Delete(ctx context.Context, id string) error {
	kind, ref := kindOf(id)
	switch {
	case kind == KindVolume:
		if err := checkRef("delete", ref); err != nil {
			return err
		}
		return p.call(ctx, "delete", id, http.MethodDelete, "/volumes/"+ref, nil, nil, nil, http.StatusNoContent)
	case !fullID.MatchString(ref):
		return fmt.Errorf("docker delete %q: not a full id (the engine would resolve a name or prefix): %w", clip(id), provider.ErrRefused)
	case kind == KindNetwork:
		return p.call(ctx, "delete", id, http.MethodDelete, "/networks/"+ref, nil, nil, nil, http.StatusNoContent)
	}
	if p.inTurn(ctx) {
		release, err := p.leaveInTurn(ctx, id, ref)
		if err != nil {
			return fmt.Errorf("docker delete %s: %w", clip(id), err)
		}
		defer release()
	}
	q := url.Values{"force": {"1"}, "v": {"1"}}
	err := p.call(ctx, "delete", id, http.MethodDelete, "/containers/"+ref, q, nil, nil, http.StatusNoContent)
	if errors.Is(err, errRemovalInProgress) {
		return nil
	}
	return err
}

// Stop stops a container (POST /containers/{id}/stop, its process given
// StopTimeout after SIGTERM); one not running answers
// provider.ErrNotStoppable (304, container_routes.go stop). A network or
// volume has nothing to stop.
func (p *Provider) Stop(ctx context.Context, id string) error {
	kind, ref := kindOf(id)
	if kind != "" {
		return provider.ErrNotStoppable
	}
	if !fullID.MatchString(ref) {
		return fmt.Errorf("docker stop %q: not a full id: %w", clip(id), provider.ErrRefused)
	}
	release, err := p.stopInTurn(ctx)
	if err != nil {
		return fmt.Errorf("docker stop %s: %w", clip(id), err)
	}
	defer release()
	q := url.Values{"t": {strconv.Itoa(int(StopTimeout / time.Second))}}
	err = p.call(ctx, "stop", id, http.MethodPost, "/containers/"+ref+"/stop", q, nil, nil, http.StatusNoContent)
	if errors.Is(err, errNotModified) {
		return fmt.Errorf("docker stop %s: %w", id, provider.ErrNotStoppable)
	}
	return err
}

// SetAutoStop: a container has no engine-side auto-stop.
func (p *Provider) SetAutoStop(context.Context, string, int) error {
	return fmt.Errorf("docker: a container has no auto-stop: %w", provider.ErrRefused)
}

// Version is what an engine says of itself (GET /version).
type Version struct {
	Version       string `json:"Version"`
	APIVersion    string `json:"ApiVersion"`
	MinAPIVersion string `json:"MinAPIVersion"`
	Os            string `json:"Os"`
	Arch          string `json:"Arch"`
	Components    []struct {
		Name string `json:"Name"`
	} `json:"Components"`
}

// Product is the engine's name: "Podman Engine" or "Docker Engine".
func (v Version) Product() string {
	if len(v.Components) > 0 && v.Components[0].Name != "" {
		return v.Components[0].Name
	}
	return "Docker Engine"
}

// Ping is GET /_ping: the engine answers.
func (p *Provider) Ping(ctx context.Context) error {
	return p.call(ctx, "ping", "", http.MethodGet, "/_ping", nil, nil, nil, http.StatusOK)
}

// Version reads GET /version.
func (p *Provider) Version(ctx context.Context) (Version, error) {
	var v Version
	err := p.call(ctx, "version", "", http.MethodGet, "/version", nil, nil, &v, http.StatusOK)
	return v, err
}

// Check pings the engine and reads its version: it answers at the address
// the environment names, to this user.
func (p *Provider) Check(ctx context.Context) error {
	if err := p.Ping(ctx); err != nil {
		return fmt.Errorf("%w (engine %s)", err, p.engine.Shown())
	}
	v, err := p.Version(ctx)
	if err != nil {
		return fmt.Errorf("%w (engine %s)", err, p.engine.Shown())
	}
	p.learnVersion(v)
	p.log.Debug("docker: engine answers", "engine", p.engine.Shown(), "product", v.Product(), "version", v.Version, "api", v.APIVersion)
	return nil
}

// Errors of answers the callers read beyond the provider's sentinels.
var (
	errRemovalInProgress = errors.New("removal already in progress")
	errNotModified       = errors.New("not modified")
)

// call makes one request under the provider's timeout: body (if any) as
// JSON, the answer decoded into out when its status is want; any other
// answer, or none, is an error the reaper can act on.
func (p *Provider) call(ctx context.Context, op, target, method, path string, q url.Values, body, out any, want int) error {
	err := p.callOnce(ctx, op, method, path, q, body, out, want)
	if err != nil {
		what := op
		if target != "" {
			what += " " + clip(target)
		}
		err = fmt.Errorf("docker %s: %w", what, err)
		p.log.Debug("docker call failed", "op", op, "target", target, "err", err.Error())
	}
	return err
}

func (p *Provider) callOnce(ctx context.Context, op, method, path string, q url.Values, body, out any, want int) error {
	timeout := p.timeout
	if op == "delete" || op == "stop" || op == "disconnect" {
		timeout = p.CallTimeout(provider.CallDelete)
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := apicall.NewRequest(cctx, method, p.base, path, q, body, func(s string) string { return s })
	if err != nil {
		return err
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return p.noAnswer(ctx, cctx, timeout, err)
	}
	defer resp.Body.Close()
	b, rerr := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if resp.StatusCode != want {
		return classify(op, method, resp.StatusCode, b)
	}
	if rerr != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("answer cut short: %w", ctx.Err())
		}
		return &apicall.Error{Msg: fmt.Sprintf("HTTP %d with an unreadable body: %s", resp.StatusCode, rerr), Kind: provider.ErrUnavailable}
	}
	if len(b) > maxBody {
		return &apicall.Error{Msg: fmt.Sprintf("HTTP %d with a body over %d bytes", resp.StatusCode, maxBody), Kind: provider.ErrUnavailable}
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return &apicall.Error{Msg: fmt.Sprintf("HTTP %d with a body that is not the expected JSON: %s", resp.StatusCode, err), Kind: provider.ErrUnavailable}
		}
	}
	return nil
}

// noAnswer classifies a call that got no answer: the caller's own end, the
// call's timeout, a socket that is not there or refuses (unreachable: an
// engine down or restarting), a socket this user may not open (a
// configuration error: the runner could not use the engine either).
func (p *Provider) noAnswer(ctx, cctx context.Context, timeout time.Duration, err error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("no answer: %w", ctx.Err())
	case cctx.Err() != nil:
		return fmt.Errorf("%w: no answer within %s", provider.ErrUnavailable, timeout)
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return &apicall.Error{Kind: provider.ErrUnauthorized,
			Msg: fmt.Sprintf("no answer: %s: this user may not open the engine's socket %s (add it to the group that owns the socket, e.g. docker)", describe(err), p.engine.Address)}
	case errors.Is(err, syscall.ENOENT):
		return provider.Unreachable(&apicall.Error{Kind: provider.ErrUnavailable,
			Msg: fmt.Sprintf("no answer: nothing at %s (%s): is the engine running?", p.engine.Address, p.engine.Source)})
	}
	return apicall.NoAnswer(err, EnvHost, nil)
}

func describe(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

// classify maps an unexpected answer onto the provider's errors, Docker's
// words and Podman's (docs in docker-facts: Podman v4.3.1 answers 500 for a
// name in use, a running container's delete and a container removed under
// it, each with its own message).
func classify(op, method string, code int, body []byte) error {
	text := serverText(body)
	msg := "HTTP " + strconv.Itoa(code)
	if text != "" {
		msg += ": " + text
	}
	lower := strings.ToLower(text)
	switch {
	case code == http.StatusNotModified:
		return errNotModified
	case code == http.StatusNotFound:
		return &apicall.Error{Msg: msg, Kind: provider.ErrNotFound}
	case code == http.StatusConflict && strings.Contains(lower, "is already in progress"):
		// daemon/delete.go:31-33: --rm's removal, or a concurrent delete.
		return fmt.Errorf("%w: %w", errRemovalInProgress, &apicall.Error{Msg: msg, Kind: provider.ErrConflict})
	case inUse(code, method, lower):
		return &apicall.Error{Msg: msg, Kind: provider.ErrInUse}
	case code == http.StatusConflict:
		return &apicall.Error{Msg: msg, Kind: provider.ErrConflict}
	case code == http.StatusInternalServerError && (strings.Contains(lower, "no such container") ||
		strings.Contains(lower, "no such volume") || strings.Contains(lower, "network not found")):
		// Podman v4.3.1: "container X does not exist in database: no such
		// container" while --rm removes it, or after a concurrent delete.
		return &apicall.Error{Msg: msg, Kind: provider.ErrNotFound}
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		// An authorization plugin refused (moby pkg/authorization), or
		// an operation on a predefined network.
		if strings.Contains(lower, "pre-defined") || strings.Contains(lower, "predefined") {
			return &apicall.Error{Msg: msg, Kind: provider.ErrRefused}
		}
		return &apicall.Error{Msg: msg, Kind: provider.ErrUnauthorized}
	case code >= 500 || code == http.StatusRequestTimeout || code == http.StatusTooManyRequests:
		return &apicall.Error{Msg: msg, Kind: provider.ErrUnavailable}
	case code == http.StatusBadRequest:
		return &apicall.Error{Msg: msg, Kind: provider.ErrRefused}
	}
	return &apicall.Error{Msg: msg}
}

// inUse reports an answer to a delete refused because other objects use
// the one deleted: a network with active endpoints (403, moby v20.10.24
// daemon/network.go; Podman: 500 "has associated containers", "network is
// being used"), a volume in use (409 "volume is in use"; Podman 409 "is
// being used").
func inUse(code int, method, lower string) bool {
	if method != http.MethodDelete {
		return false
	}
	switch {
	case code == http.StatusForbidden && strings.Contains(lower, "active endpoints"):
		return true
	case code == http.StatusConflict && (strings.Contains(lower, "volume is in use") || strings.Contains(lower, "is being used")):
		return true
	case code == http.StatusInternalServerError && (strings.Contains(lower, "associated containers") || strings.Contains(lower, "is being used")):
		return true
	}
	return false
}

// serverText is the engine's message ({"message": ...}), bounded; the raw
// body when it is not that.
func serverText(b []byte) string {
	text := strings.TrimSpace(string(b))
	var e struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &e) == nil && e.Message != "" {
		text = e.Message
	}
	return clip(text)
}

func clip(s string) string {
	if len(s) <= maxErrorMsg {
		return s
	}
	return strings.ToValidUTF8(s[:maxErrorMsg], "") + "…"
}
