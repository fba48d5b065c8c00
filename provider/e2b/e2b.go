// Package e2b is tether's Provider for E2B sandboxes (e2b.dev, self-hosted
// E2B, and services that speak its API), over a small client of its own:
// E2B ships no Go SDK. The calls it makes are described in openapi.yaml
// beside this file; tests validate the client against it.
//
// E2B sandboxes have no name, only the id the server assigns. tether's
// name for a sandbox, and its ownership and scope labels, live in the
// sandbox's metadata (MetadataName beside the labels): GetByName and List
// are metadata-filtered lists, so a create whose answer was lost is found
// the way a Daytona one is found by its name. Forks carry their parent's
// metadata, so one name may be several sandboxes': Named lists them all
// (provider.NameSharer), and the reaper gives each intent its own.
//
// It is configured like E2B's own SDKs (E2B_API_KEY, E2B_DOMAIN,
// E2B_API_URL, E2B_DEBUG), maps HTTP answers onto the provider package's
// sentinel errors so the reaper can decide to retry, wait or give up,
// bounds every call with its own timeout, and never lets the key reach an
// error or a log line.
//
// Gone: the API answers 404 alike for a sandbox that is gone and for one
// of another team. An E2B key belongs to one team, so Account (a hash of
// the API URL and the key) names the team; the reaper refuses an intent
// recorded under another Account before it makes any call, and only then
// is a 404 "gone". Ids are checked before they are sent: the server cuts
// "<id>-<anything>" to <id>, which would name another sandbox.
package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/internal/apicall"
)

const (
	// DefaultDomain is E2B's cloud, the SDKs' default.
	DefaultDomain = "e2b.app"
	// DebugAPIURL is the API the SDKs use with E2B_DEBUG=true and no
	// E2B_API_URL.
	DebugAPIURL = "http://localhost:3000"
	// DefaultTemplate is the template Create uses when none is given: the
	// SDKs' default.
	DefaultTemplate = "base"
	// DefaultTimeout is the sandbox timeout Create asks for when none is
	// given: the SDKs' default (js-sdk src/connectionConfig.ts:9). The
	// server's own default, for a create without one, is 15 s.
	DefaultTimeout = 300 * time.Second
	// DefaultCallTimeout bounds each API call when Config.CallTimeout is zero.
	DefaultCallTimeout = 10 * time.Second
	// MetadataName is the metadata key that carries tether's name for a
	// sandbox.
	MetadataName = "tether-name"
	// maxErrorMessage bounds how much of a server's error message an error keeps.
	maxErrorMessage = 300
	// maxBody bounds an answer's body: a page of 100 sandboxes with their
	// metadata is well under it.
	maxBody = 8 << 20
	// listPageLimit is the page size asked of GET /v2/sandboxes, the
	// server's maximum (packages/api/internal/handlers/sandboxes_list.go:31-33).
	listPageLimit = 100
	// maxListPages bounds a List, so that a server that keeps answering
	// with a next token cannot loop it forever.
	maxListPages = 1000
)

// Environment variables, the names the SDKs read (js-sdk
// src/connectionConfig.ts:411-421, 463-486; python-sdk
// e2b/connection_config.py:169-190, 237-263).
const (
	EnvAPIKey = "E2B_API_KEY"
	EnvDomain = "E2B_DOMAIN"
	EnvAPIURL = "E2B_API_URL"
	EnvDebug  = "E2B_DEBUG"
)

// Config says how to reach one E2B team.
type Config struct {
	// APIKey authenticates (X-API-Key); it names the team.
	APIKey string
	// APIURL is the API base URL; empty: https://api.<Domain>.
	APIURL string
	// Domain is E2B's domain (DefaultDomain if empty).
	Domain string
	// CallTimeout bounds each call (DefaultCallTimeout if zero).
	CallTimeout time.Duration
	// HTTPClient makes the calls (a new client if nil).
	HTTPClient *http.Client
	// Logger receives debug lines about failed calls (slog.Default() if
	// nil). The key never appears in them.
	Logger *slog.Logger
}

// ConfigFromEnv reads the SDKs' environment variables with their
// precedence: E2B_API_URL, else http://localhost:3000 with E2B_DEBUG=true,
// else https://api.<E2B_DOMAIN or e2b.app>.
func ConfigFromEnv() (Config, error) {
	cfg := Config{
		APIKey: os.Getenv(EnvAPIKey),
		APIURL: os.Getenv(EnvAPIURL),
		Domain: os.Getenv(EnvDomain),
	}
	if cfg.APIURL == "" && strings.EqualFold(os.Getenv(EnvDebug), "true") {
		cfg.APIURL = DebugAPIURL
	}
	if cfg.APIKey == "" {
		return Config{}, errors.New("no E2B credentials: set " + EnvAPIKey)
	}
	return cfg, nil
}

// apiURL is the URL the config names.
func (c Config) apiURL() string {
	if c.APIURL != "" {
		return c.APIURL
	}
	d := c.Domain
	if d == "" {
		d = DefaultDomain
	}
	return "https://api." + d
}

// String keeps the key out of any %v of a Config.
func (c Config) String() string {
	return fmt.Sprintf("e2b.Config{APIURL: %q, APIKey: %s, CallTimeout: %s}", apicall.RedactURL(c.apiURL()), provider.SecretMark(c.APIKey), c.CallTimeout)
}

// GoString keeps the key out of a %#v of a Config.
func (c Config) GoString() string { return c.String() }

// LogValue keeps the key out of a Config given to slog.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(slog.String("api_url", apicall.RedactURL(c.apiURL())), slog.String("api_key", provider.SecretMark(c.APIKey)))
}

// Fingerprint names an account without revealing its key: a hash of the
// normalised API URL and the key. An E2B key belongs to one team, and
// every sandbox of the API is its team's, so the fingerprint names the
// team whose sandboxes a 404 speaks of.
func Fingerprint(apiURL, key string) string {
	return provider.Fingerprint("e2b", apiURL, key)
}

// TeamFingerprint names the account of a caller that authenticates with
// an auth provider's token and X-Team-ID (spec/openapi.yml:10-42): the
// team itself, whose id the header gives (a token changes as it is
// refreshed; the team does not).
func TeamFingerprint(apiURL, teamID string) string {
	return provider.Fingerprint("e2b", apiURL, "team:"+teamID)
}

// Provider is one E2B team. It is safe for concurrent use.
type Provider struct {
	base    string // API URL without a trailing slash
	key     string
	secrets apicall.Secrets
	account string
	timeout time.Duration
	hc      *http.Client
	log     *slog.Logger

	mu        sync.Mutex
	exhausted map[string]time.Time // by route pattern: quota known spent until then
}

var (
	_ provider.Provider  = (*Provider)(nil)
	_ provider.Throttled = (*Provider)(nil)
	_ provider.Quotas    = (*Provider)(nil)
	_ provider.Checker   = (*Provider)(nil)
	_ provider.Account   = (*Provider)(nil)
)

// New checks cfg and returns a Provider. It makes no call.
func New(cfg Config) (*Provider, error) {
	if cfg.APIKey == "" {
		return nil, errors.New("no E2B credentials: set " + EnvAPIKey)
	}
	raw := cfg.apiURL()
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" {
		return nil, fmt.Errorf("e2b API URL %q: want http(s)://host[/path]", apicall.RedactURL(raw))
	}
	if cfg.CallTimeout < 0 {
		return nil, fmt.Errorf("e2b call timeout %s: must not be negative", cfg.CallTimeout)
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	hc := &http.Client{}
	if cfg.HTTPClient != nil {
		c := *cfg.HTTPClient
		hc = &c
	}
	if hc.CheckRedirect == nil {
		// The key travels in X-API-Key, which Go's client would carry to
		// any host a redirect names (it strips only Authorization and
		// Cookie). The API never redirects: a redirect is an answer.
		hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	p := &Provider{
		base:      strings.TrimRight(raw, "/"),
		key:       cfg.APIKey,
		account:   Fingerprint(raw, cfg.APIKey),
		timeout:   cfg.CallTimeout,
		hc:        hc,
		log:       log,
		exhausted: map[string]time.Time{},
	}
	p.secrets.Add(cfg.APIKey)
	return p, nil
}

// ProviderName is the provider's name as journaled with each intent.
const ProviderName = "e2b"

// Name is ProviderName.
func (p *Provider) Name() string { return ProviderName }

// Account is the fingerprint of the API URL and key in use.
func (p *Provider) Account() string { return p.account }

// APIURL is the API base URL in use.
func (p *Provider) APIURL() string { return p.base }

// sandboxIDPattern is what the server accepts as a sandbox id
// (packages/shared/pkg/id/id.go:19). The server also takes
// "<id>-<client id>" and cuts it to <id> (packages/api/internal/utils/
// split.go:10-26), so an id with a dash must never be sent: it would name
// another sandbox.
var sandboxIDPattern = regexp.MustCompile(`^[a-z0-9]{1,64}$`)

// checkID refuses an id no E2B sandbox can have. It is not found: no
// sandbox has it.
func checkID(op, id string) error {
	if !sandboxIDPattern.MatchString(id) {
		return fmt.Errorf("e2b %s %q: not an E2B sandbox id: %w", op, truncate(id, 80), provider.ErrNotFound)
	}
	return nil
}

// Get reads a running or paused sandbox by id. ErrNotFound when there is
// none for this team: gone, never made, still being created, being
// killed, or another team's, which the server does not tell apart.
func (p *Provider) Get(ctx context.Context, id string) (provider.Sandbox, error) {
	d, err := p.detail(ctx, id)
	if err != nil {
		return provider.Sandbox{}, err
	}
	return d.sandbox(time.Now()), nil
}

func (p *Provider) detail(ctx context.Context, id string) (*detailJSON, error) {
	if err := checkID("get", id); err != nil {
		return nil, err
	}
	var d detailJSON
	if _, err := p.call(ctx, "get", id, http.MethodGet, "/sandboxes/"+id, nil, nil, &d, http.StatusOK); err != nil {
		return nil, err
	}
	if d.SandboxID != id {
		return nil, fmt.Errorf("e2b get %s: the answer is sandbox %q: %w", id, truncate(d.SandboxID, 80), provider.ErrNotFound)
	}
	return &d, nil
}

// GetByName finds the sandbox whose metadata names it name (MetadataName),
// running or paused. ErrNotFound when there is none. Forks inherit their
// parent's metadata, so several may carry one name: then the one that
// started first (the smallest id among equals) is returned; Named returns
// them all.
func (p *Provider) GetByName(ctx context.Context, name string) (provider.Sandbox, error) {
	items, err := p.Named(ctx, name)
	if err != nil {
		return provider.Sandbox{}, err
	}
	if len(items) == 0 {
		return provider.Sandbox{}, fmt.Errorf("e2b get by name %s: %w", name, provider.ErrNotFound)
	}
	if len(items) > 1 {
		p.log.Debug("e2b: several sandboxes carry one name (forks inherit metadata); taking the first started",
			"name", name, "count", len(items), "sandbox", items[0].ID)
	}
	return items[0], nil
}

// Named lists the running and paused sandboxes whose metadata names them
// name, the first started first (the smallest id among equals): a
// sandbox and the forks that inherited its metadata (provider.NameSharer).
func (p *Provider) Named(ctx context.Context, name string) ([]provider.Sandbox, error) {
	items, err := p.List(ctx, map[string]string{MetadataName: name})
	if err != nil {
		return nil, err
	}
	items = slices.DeleteFunc(items, func(sb provider.Sandbox) bool { return sb.Name != name })
	slices.SortFunc(items, func(a, b provider.Sandbox) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return items, nil
}

// List returns the running and paused sandboxes whose metadata includes
// every given pair, all pages.
func (p *Provider) List(ctx context.Context, labels map[string]string) ([]provider.Sandbox, error) {
	var out []provider.Sandbox
	token := ""
	now := time.Now()
	for range maxListPages {
		page, next, err := p.listPage(ctx, labels, token, false)
		if err != nil {
			return nil, err
		}
		for i := range page {
			out = append(out, page[i].sandbox(now))
		}
		if next == "" || next == token {
			return out, nil
		}
		token = next
	}
	return nil, fmt.Errorf("e2b list: more than %d pages: %w", maxListPages, provider.ErrUnavailable)
}

// listPage is one GET /v2/sandboxes of running and paused sandboxes.
func (p *Provider) listPage(ctx context.Context, labels map[string]string, token string, asc bool) ([]listedJSON, string, error) {
	q := url.Values{}
	q.Set("state", "running,paused")
	q.Set("limit", strconv.Itoa(listPageLimit))
	if len(labels) > 0 {
		q.Set("metadata", EncodeMetadataFilter(labels))
	}
	if asc {
		q.Set("order", "asc")
	}
	if token != "" {
		q.Set("nextToken", token)
	}
	var page []listedJSON
	h, err := p.call(ctx, "list", "", http.MethodGet, "/v2/sandboxes", q, nil, &page, http.StatusOK)
	if err != nil {
		return nil, "", err
	}
	return page, h.Get("X-Next-Token"), nil
}

// EncodeMetadataFilter is the metadata query value for these pairs, as the
// SDKs build it (js-sdk src/sandbox/sandboxApi.ts:1853-1862, python-sdk
// e2b/sandbox_sync/paginator.py:53-59): each key and value escaped,
// joined as key=value&..., then escaped again as a form would. The query
// string escapes it a third time. The server unescapes three times: the
// query, the whole value, each key and value (packages/api/internal/utils/
// sandboxes_list.go:201-230), so keys and values with &, =, + or % pass
// whole. Pairs are sorted, so one filter is one URL.
func EncodeMetadataFilter(labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	pairs := make([]string, len(keys))
	for i, k := range keys {
		pairs[i] = url.QueryEscape(url.QueryEscape(k)) + "=" + url.QueryEscape(url.QueryEscape(labels[k]))
	}
	return strings.Join(pairs, "&")
}

// Delete kills the sandbox and deletes its snapshot if it is paused. The
// server answers 204 once the node has killed it, then 404. A 404 also
// answers an id of another team, so a 404 means gone only for a sandbox
// this team made: the caller checks that the intent was recorded under
// this Provider's Account (the key names the team) before it believes one.
func (p *Provider) Delete(ctx context.Context, id string) error {
	if err := checkID("delete", id); err != nil {
		return err
	}
	_, err := p.call(ctx, "delete", id, http.MethodDelete, "/sandboxes/"+id, nil, nil, nil, http.StatusNoContent)
	return err
}

// Stop pauses the sandbox: E2B's stop keeps its filesystem and memory as
// a snapshot (which costs storage) until it is resumed or killed. A
// sandbox already paused answers ErrNotStoppable.
func (p *Provider) Stop(ctx context.Context, id string) error {
	if err := checkID("stop", id); err != nil {
		return err
	}
	_, err := p.call(ctx, "stop", id, http.MethodPost, "/sandboxes/"+id+"/pause", nil, nil, nil, http.StatusNoContent)
	return err
}

// SetAutoStop sets the sandbox's timeout: it ends (is killed, or paused
// if made with auto-pause) minutes from now, sooner or later than before.
// E2B's timeout is not idle time: it runs whatever the sandbox does. E2B
// has no "never": 0 would end it at once, so minutes must be positive. The
// server caps the end at the team's maximum length from the sandbox's
// start. A paused sandbox has no timeout and answers ErrNotFound.
func (p *Provider) SetAutoStop(ctx context.Context, id string, minutes int) error {
	if minutes <= 0 {
		return fmt.Errorf("e2b timeout %s: %d minutes: E2B has no disabled timeout, and 0 ends the sandbox at once", id, minutes)
	}
	return p.SetTimeout(ctx, id, time.Duration(minutes)*time.Minute)
}

// SetTimeout is POST /sandboxes/{id}/timeout: the sandbox ends d from
// now (whole seconds, rounded up).
func (p *Provider) SetTimeout(ctx context.Context, id string, d time.Duration) error {
	if err := checkID("timeout", id); err != nil {
		return err
	}
	secs := int64(math.Ceil(d.Seconds()))
	if secs <= 0 || secs > math.MaxInt32 {
		return fmt.Errorf("e2b timeout %s: %s: want 1 s to %d s", id, d, math.MaxInt32)
	}
	_, err := p.call(ctx, "timeout", id, http.MethodPost, "/sandboxes/"+id+"/timeout", nil, map[string]int64{"timeout": secs}, nil, http.StatusNoContent)
	return err
}

var _ provider.HandOffer = (*Provider)(nil)

// HandOffTimeout is the timeout HandOff sets: short, so that a sandbox
// it is set on ends soon, and one that was to end sooner ends at most
// this much later (E2B's timeout runs from the call, longer or shorter).
const HandOffTimeout = 10 * time.Second

// HandOff leaves a sandbox to E2B's own timer: its timeout cut to
// HandOffTimeout (POST /sandboxes/{id}/timeout, a route of its own, not
// the bucket of the kill). At its timeout E2B kills it, or pauses it when
// it was made with auto-pause. A stop (a pause) is not handed off: the
// timeout would kill a sandbox made without auto-pause, which its runner
// asked to keep (ErrNoHandOff).
func (p *Provider) HandOff(ctx context.Context, id string, stop bool) (string, error) {
	if stop {
		return "", provider.ErrNoHandOff
	}
	if err := p.SetTimeout(ctx, id, HandOffTimeout); err != nil {
		return "", err
	}
	return fmt.Sprintf("timeout %s", HandOffTimeout), nil
}

// CreateOptions are the settings of Create beside name and labels.
type CreateOptions struct {
	Template  string        // DefaultTemplate if empty
	Timeout   time.Duration // DefaultTimeout if zero; whole seconds
	AutoPause bool          // pause instead of kill at the timeout
}

// Create makes a sandbox whose metadata carries the labels and name under
// MetadataName. It is what a runner does; tether itself uses it only in
// tests and the demo.
func (p *Provider) Create(ctx context.Context, name string, labels map[string]string, o CreateOptions) (provider.Sandbox, error) {
	if o.Template == "" {
		o.Template = DefaultTemplate
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	secs := int64(math.Ceil(o.Timeout.Seconds()))
	if secs <= 0 || secs > math.MaxInt32 {
		return provider.Sandbox{}, fmt.Errorf("e2b create %s: timeout %s: want 1 s to %d s", name, o.Timeout, math.MaxInt32)
	}
	md := make(map[string]string, len(labels)+1)
	for k, v := range labels {
		md[k] = v
	}
	if name != "" {
		md[MetadataName] = name
	}
	body := map[string]any{"templateID": o.Template, "timeout": secs, "metadata": md}
	if o.AutoPause {
		body["autoPause"] = true
	}
	var sb sandboxJSON
	if _, err := p.call(ctx, "create", name, http.MethodPost, "/sandboxes", nil, body, &sb, http.StatusCreated); err != nil {
		return provider.Sandbox{}, err
	}
	if !sandboxIDPattern.MatchString(sb.SandboxID) {
		return provider.Sandbox{}, fmt.Errorf("e2b create %s: the answer names no valid sandbox id (%q): %w", name, truncate(sb.SandboxID, 80), provider.ErrUnavailable)
	}
	now := time.Now()
	return provider.Sandbox{
		ID: sb.SandboxID, Name: name, State: provider.StateStarted, Labels: md,
		AutoStopMinutes: minutesUntil(now.Add(o.Timeout), now), CreatedAt: now,
	}, nil
}

// Check looks first at what needs no call (an https URL on a system without
// CA certificates), then makes one cheap authenticated read (a list of at
// most one sandbox), and says what to fix when either fails: the key
// (401/403), the URL (404, DNS), the certificates (TLS).
func (p *Provider) Check(ctx context.Context) error {
	if err := p.trustProblem(); err != nil {
		return fmt.Errorf("e2b check: %w", err)
	}
	q := url.Values{"limit": {"1"}}
	// A refused key and a wrong URL say what to fix (classify), as every
	// call's error does.
	_, err := p.call(ctx, "check", "", http.MethodGet, "/v2/sandboxes", q, nil, nil, http.StatusOK)
	return err
}

// What a refused key and a wrong URL say to fix, wherever they show: the
// start-up check, doctor, a sweep, a drain.
var (
	refusedKeyFix = "check " + EnvAPIKey + ", and that " + EnvAPIURL + " (or " + EnvDomain + ") is the API the key belongs to"
	wrongURLFix   = EnvAPIURL + " does not look like the E2B API"
)

// accountRead are the calls that read the team's sandboxes, not one
// sandbox: a 404 to them is a wrong URL.
var accountRead = map[string]bool{"list": true, "check": true}

// call makes one request under its own timeout: body (if any) as JSON,
// the answer decoded into out (if any) when its status is want; any other
// answer, or none, is an error the reaper can act on, free of the key.
// It returns the answer's headers.
func (p *Provider) call(ctx context.Context, op, target, method, path string, q url.Values, body, out any, want int) (http.Header, error) {
	h, err := p.callOnce(ctx, op, method, path, q, body, out, want)
	if err != nil {
		what := op // a list or a check names no sandbox
		if target != "" {
			what += " " + p.secrets.Redact(target)
		}
		err = fmt.Errorf("e2b %s: %w", what, err)
		p.log.Debug("e2b call failed", "op", op, "target", p.secrets.Redact(target), "err", err.Error())
	}
	return h, err
}

func (p *Provider) callOnce(ctx context.Context, op, method, path string, q url.Values, body, out any, want int) (http.Header, error) {
	cctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	req, err := apicall.NewRequest(cctx, method, p.base, path, q, body, p.secrets.Redact)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-API-Key", p.key)
	req.Header.Set("Accept", "application/json")
	resp, err := p.hc.Do(req)
	if err != nil {
		return nil, p.noAnswer(ctx, cctx, err)
	}
	defer resp.Body.Close()
	p.noteQuota(path, resp.StatusCode, resp.Header, time.Now())
	b, rerr := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if resp.StatusCode != want {
		return resp.Header, p.classify(op, resp.StatusCode, resp.Header, b)
	}
	if rerr != nil {
		if ctx.Err() != nil {
			return resp.Header, fmt.Errorf("answer cut short: %w", ctx.Err())
		}
		return resp.Header, &apicall.Error{Msg: fmt.Sprintf("HTTP %d with an unreadable body: %s", resp.StatusCode, p.secrets.Redact(rerr.Error())), Kind: provider.ErrUnavailable}
	}
	if len(b) > maxBody {
		return resp.Header, &apicall.Error{Msg: fmt.Sprintf("HTTP %d with a body over %d bytes", resp.StatusCode, maxBody), Kind: provider.ErrUnavailable}
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.Header, &apicall.Error{Msg: fmt.Sprintf("HTTP %d with a body that is not the expected JSON: %s", resp.StatusCode, p.secrets.Redact(err.Error())), Kind: provider.ErrUnavailable}
		}
	}
	return resp.Header, nil
}

// noAnswer classifies a call that got no answer.
func (p *Provider) noAnswer(ctx, cctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		// The caller's own deadline or cancellation: not ours to retry.
		return fmt.Errorf("no answer: %w", ctx.Err())
	case cctx.Err() != nil:
		return fmt.Errorf("%w: no answer within %s", provider.ErrUnavailable, p.timeout)
	}
	return apicall.NoAnswer(err, EnvAPIURL, p.secrets)
}

// classify maps an unexpected answer onto the provider's errors.
func (p *Provider) classify(op string, code int, h http.Header, body []byte) error {
	text := p.serverText(body)
	msg := "HTTP " + strconv.Itoa(code)
	if text != "" {
		msg += ": " + text
	}
	switch {
	case code == http.StatusNotFound && accountRead[op]:
		// E2B answers a list of sandboxes, if only with none: a 404 is
		// a URL that is not the API's. A configuration error, never
		// "sandbox not found".
		return &apicall.Error{Msg: msg + ": " + wrongURLFix, Kind: provider.ErrMisconfigured}
	case code == http.StatusNotFound:
		return &apicall.Error{Msg: msg, Kind: provider.ErrNotFound}
	case code == http.StatusConflict && op == "stop" && strings.Contains(text, "already paused"):
		// handlers/sandbox_pause.go:111-114
		return &apicall.Error{Msg: msg, Kind: provider.ErrNotStoppable}
	case code == http.StatusConflict:
		return &apicall.Error{Msg: msg, Kind: provider.ErrConflict}
	case code == http.StatusTooManyRequests:
		return fmt.Errorf("%w: %s", rateLimit(h, text, time.Now()), msg)
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		// 403 is a banned team at authentication (packages/auth/pkg/auth/
		// internal/team/state.go:13-19), or a blocked one outside its
		// allowlist (middleware/blocked_team.go:14-47: reads, the list and
		// DELETE still answer, so a drain still works): like a wrong key,
		// only an operator can help.
		return &apicall.Error{Msg: msg + ": " + refusedKeyFix, Kind: provider.ErrUnauthorized}
	case code >= 500 || code == http.StatusRequestTimeout:
		return &apicall.Error{Msg: msg, Kind: provider.ErrUnavailable}
	case code == http.StatusBadRequest:
		return &apicall.Error{Msg: msg, Kind: provider.ErrRefused}
	}
	return &apicall.Error{Msg: msg}
}

// serverText is the server's message ({"code": ..., "message": ...}),
// redacted and bounded; the raw body when it is not that.
func (p *Provider) serverText(b []byte) string {
	text := strings.TrimSpace(string(b))
	var e errorJSON
	if json.Unmarshal(b, &e) == nil && e.Message != "" {
		text = e.Message
	}
	text = p.secrets.Redact(text)
	return truncate(text, maxErrorMessage)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
