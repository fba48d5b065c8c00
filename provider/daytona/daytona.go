// Package daytona is tether's Provider for Daytona sandboxes, over the
// official generated client (github.com/daytonaio/daytona/libs/api-client-go).
//
// It is configured like Daytona's own SDKs (DAYTONA_API_KEY, or
// DAYTONA_JWT_TOKEN with DAYTONA_ORGANIZATION_ID; DAYTONA_API_URL;
// DAYTONA_TARGET), maps HTTP answers onto the provider package's sentinel
// errors so the reaper can decide to retry, wait or give up, bounds every
// call with its own timeout, and never lets a credential reach an error or
// a log line.
package daytona

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	apiclient "github.com/daytonaio/daytona/libs/api-client-go"

	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/internal/apicall"
)

const (
	// DefaultAPIURL is Daytona's cloud API, the SDKs' default.
	DefaultAPIURL = "https://app.daytona.io/api"
	// DefaultCallTimeout bounds each API call when Config.CallTimeout is zero.
	// The caller's context may end a call sooner.
	DefaultCallTimeout = 10 * time.Second
	// maxErrorMessage bounds how much of a server's error message an error keeps.
	maxErrorMessage = 300
	// listPageLimit is the page size asked of GET /sandbox (the spec's maximum).
	listPageLimit = 200
	// maxListPages bounds a List so that a server that keeps answering with a
	// next cursor cannot loop it forever.
	maxListPages = 1000
	// DefaultAuthContextRetries is how many times a call answered 403
	// "Invalid authentication context" is tried again before the 403 is
	// taken as final: Daytona answers it when its lookup of the organization
	// fails, a database or cache error included (apps/api/src/organization/
	// guards/organization-auth-context.guard.ts:53-56, 119-122 at v0.190.0),
	// so it often passes.
	DefaultAuthContextRetries = 2
	// DefaultAuthContextRetryWait is the pause before each such retry.
	DefaultAuthContextRetryWait = 200 * time.Millisecond
)

// Daytona's 403 messages (apps/api/src/common/exceptions/).
const (
	msgInvalidAuthContext = "Invalid authentication context"
	msgAccessDenied       = "Access denied"
)

// Environment variables, the same names the official SDKs read.
const (
	EnvAPIKey         = "DAYTONA_API_KEY"
	EnvJWTToken       = "DAYTONA_JWT_TOKEN"
	EnvOrganizationID = "DAYTONA_ORGANIZATION_ID"
	EnvAPIURL         = "DAYTONA_API_URL"
	EnvServerURL      = "DAYTONA_SERVER_URL" // deprecated by Daytona; read when DAYTONA_API_URL is unset
	EnvTarget         = "DAYTONA_TARGET"
)

// Config says how to reach one Daytona account.
type Config struct {
	// APIKey authenticates; when set it wins over JWTToken, as in the SDKs.
	APIKey string
	// APIURL is the API base URL, ending in /api (DefaultAPIURL if empty).
	APIURL string
	// Target is the region new sandboxes are created in (empty: the
	// organization's default).
	Target string
	// JWTToken with OrganizationID authenticates when there is no APIKey.
	JWTToken       string
	OrganizationID string
	// CallTimeout bounds each call (DefaultCallTimeout if zero).
	CallTimeout time.Duration
	// HTTPClient makes the calls (a new client if nil). Its own Timeout, if
	// any, applies on top of CallTimeout.
	HTTPClient *http.Client
	// Logger receives debug lines about failed calls (slog.Default() if nil).
	// Credentials never appear in them.
	Logger *slog.Logger
	// AuthContextRetries bounds the retries of a call answered 403 "Invalid
	// authentication context" (DefaultAuthContextRetries if zero; negative:
	// none). 401, and 403 "Access denied", are never retried.
	AuthContextRetries int
	// AuthContextRetryWait is the pause before each of those retries
	// (DefaultAuthContextRetryWait if zero).
	AuthContextRetryWait time.Duration
}

// ConfigFromEnv reads the Daytona SDKs' environment variables, with their
// precedence: DAYTONA_API_KEY over DAYTONA_JWT_TOKEN (which then needs
// DAYTONA_ORGANIZATION_ID); DAYTONA_API_URL, else the deprecated
// DAYTONA_SERVER_URL, else DefaultAPIURL; DAYTONA_TARGET.
func ConfigFromEnv() (Config, error) { return ConfigFrom(os.Getenv) }

// ConfigFrom is ConfigFromEnv with each variable read by getenv (e.g. from
// the environment and the .env files the TypeScript and Python SDKs read);
// an empty value is unset.
func ConfigFrom(getenv func(string) string) (Config, error) {
	cfg := Config{
		APIKey:         getenv(EnvAPIKey),
		JWTToken:       getenv(EnvJWTToken),
		OrganizationID: getenv(EnvOrganizationID),
		APIURL:         getenv(EnvAPIURL),
		Target:         getenv(EnvTarget),
	}
	if cfg.APIURL == "" {
		cfg.APIURL = getenv(EnvServerURL)
	}
	if cfg.APIURL == "" {
		cfg.APIURL = DefaultAPIURL
	}
	if err := cfg.checkCredentials(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

func (c Config) checkCredentials() error {
	if c.APIKey == "" && c.JWTToken == "" {
		return errors.New("no Daytona credentials: set DAYTONA_API_KEY, or both DAYTONA_JWT_TOKEN and DAYTONA_ORGANIZATION_ID")
	}
	if c.APIKey == "" && c.OrganizationID == "" {
		return errors.New("DAYTONA_ORGANIZATION_ID is required when authenticating with DAYTONA_JWT_TOKEN")
	}
	return nil
}

// String keeps the credentials out of any %v of a Config.
func (c Config) String() string {
	return fmt.Sprintf("daytona.Config{APIURL: %q, Target: %q, OrganizationID: %q, APIKey: %s, JWTToken: %s, CallTimeout: %s}",
		apicall.RedactURL(c.APIURL), c.Target, c.OrganizationID, provider.SecretMark(c.APIKey), provider.SecretMark(c.JWTToken), c.CallTimeout)
}

// GoString keeps the credentials out of a %#v of a Config.
func (c Config) GoString() string { return c.String() }

// LogValue keeps the credentials out of a Config given to slog.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("api_url", apicall.RedactURL(c.APIURL)),
		slog.String("target", c.Target),
		slog.String("organization_id", c.OrganizationID),
		slog.String("api_key", provider.SecretMark(c.APIKey)),
		slog.String("jwt_token", provider.SecretMark(c.JWTToken)),
	)
}

// minSecretLen is the shortest credential redacted from messages. Daytona's
// API keys are "dtn_" and 64 hex digits, its JWTs hundreds of characters.
const minSecretLen = 8

// Fingerprint names an account without revealing its key: a hash of the
// normalised API URL and the key. tether journals it with each intent and
// refuses to act on an intent recorded under another fingerprint.
func Fingerprint(apiURL, key string) string {
	return provider.Fingerprint("daytona", apiURL, key)
}

// Provider is one Daytona account. It is safe for concurrent use.
type Provider struct {
	api     *apiclient.APIClient
	token   string
	secrets apicall.Secrets
	account string
	target  string
	timeout time.Duration
	log     *slog.Logger
	// urlFrom names where the API URL was set, for messages ("" when
	// unknown: then the environment is read again).
	urlFrom string

	authRetries int
	authWait    time.Duration

	mu        sync.Mutex
	exhausted map[string]time.Time // by throttler: window known spent until its reset
	block     map[string]time.Time // by throttler: refused (429) until then
}

var (
	_ provider.Provider  = (*Provider)(nil)
	_ provider.Throttled = (*Provider)(nil)
	_ provider.Quotas    = (*Provider)(nil)
)

// New checks cfg and returns a Provider. It makes no call.
func New(cfg Config) (*Provider, error) {
	if err := cfg.checkCredentials(); err != nil {
		return nil, err
	}
	if cfg.APIURL == "" {
		cfg.APIURL = DefaultAPIURL
	}
	u, err := url.Parse(cfg.APIURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("daytona API URL %q: want http(s)://host/path", apicall.RedactURL(cfg.APIURL))
	}
	if cfg.CallTimeout < 0 {
		return nil, fmt.Errorf("daytona call timeout %s: must not be negative", cfg.CallTimeout)
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}

	ac := apiclient.NewConfiguration()
	ac.Servers = apiclient.ServerConfigurations{{URL: strings.TrimRight(cfg.APIURL, "/")}}
	ac.HTTPClient = hc
	ac.UserAgent = "tether"
	p := &Provider{target: cfg.Target, timeout: cfg.CallTimeout, log: log,
		authRetries: cfg.AuthContextRetries, authWait: cfg.AuthContextRetryWait, exhausted: map[string]time.Time{}, block: map[string]time.Time{}}
	switch {
	case p.authRetries == 0:
		p.authRetries = DefaultAuthContextRetries
	case p.authRetries < 0:
		p.authRetries = 0
	}
	if p.authWait <= 0 {
		p.authWait = DefaultAuthContextRetryWait
	}
	if cfg.APIKey != "" {
		p.token = cfg.APIKey
		p.account = Fingerprint(cfg.APIURL, cfg.APIKey)
	} else {
		// A JWT is short-lived, so the account is the organization it acts in.
		p.token = cfg.JWTToken
		p.account = Fingerprint(cfg.APIURL, "organization:"+cfg.OrganizationID)
		ac.AddDefaultHeader("X-Daytona-Organization-ID", cfg.OrganizationID)
	}
	for _, s := range []string{cfg.APIKey, cfg.JWTToken} {
		// A credential shorter than any real one (a test's "k") would
		// otherwise turn every "k" of every message into [REDACTED]; the
		// server refuses it anyway, so there is nothing to hide.
		if len(s) >= minSecretLen {
			p.secrets.Add(s)
		}
	}
	p.api = apiclient.NewAPIClient(ac)
	return p, nil
}

// ProviderName is the provider's name as journaled with each intent.
const ProviderName = "daytona"

// Name is ProviderName.
func (p *Provider) Name() string { return ProviderName }

// Account is the fingerprint of the credentials in use.
func (p *Provider) Account() string { return p.account }

// Get reads a sandbox by id. The API resolves ids and names alike, so an
// answer for another id (a sandbox whose name happens to be this id) is
// treated as not found.
func (p *Provider) Get(ctx context.Context, id string) (provider.Sandbox, error) {
	sb, err := p.getByID(ctx, id)
	if err != nil {
		return provider.Sandbox{}, err
	}
	return fromSandbox(sb), nil
}

// getByID is the read of Get and Inspect: the sandbox with exactly that id.
func (p *Provider) getByID(ctx context.Context, id string) (*apiclient.Sandbox, error) {
	var sb *apiclient.Sandbox
	err := p.call(ctx, "get", id, func(ctx context.Context) (*http.Response, error) {
		var resp *http.Response
		var err error
		sb, resp, err = p.api.SandboxAPI.GetSandbox(ctx, id).Execute()
		return resp, err
	})
	if err != nil {
		return nil, err
	}
	if sb.GetId() != id {
		return nil, fmt.Errorf("daytona get %s: the answer is sandbox %s: %w", id, sb.GetId(), provider.ErrNotFound)
	}
	return sb, nil
}

// GetByName reads the sandbox with exactly this name. GET /sandbox/{idOrName}
// tries ids first, so an answer with another name falls back to a list
// filtered by name.
func (p *Provider) GetByName(ctx context.Context, name string) (provider.Sandbox, error) {
	var sb *apiclient.Sandbox
	err := p.call(ctx, "get", name, func(ctx context.Context) (*http.Response, error) {
		var resp *http.Response
		var err error
		sb, resp, err = p.api.SandboxAPI.GetSandbox(ctx, name).Execute()
		return resp, err
	})
	if err != nil {
		return provider.Sandbox{}, err
	}
	if sb.GetName() == name {
		return fromSandbox(sb), nil
	}
	items, err := p.list(ctx, nil, name)
	if err != nil {
		return provider.Sandbox{}, err
	}
	for _, it := range items {
		if it.Name == name {
			return it, nil
		}
	}
	return provider.Sandbox{}, fmt.Errorf("daytona get by name %s: %w", name, provider.ErrNotFound)
}

// List returns the sandboxes whose labels include every given pair, all pages.
func (p *Provider) List(ctx context.Context, labels map[string]string) ([]provider.Sandbox, error) {
	return p.list(ctx, labels, "")
}

func (p *Provider) list(ctx context.Context, labels map[string]string, namePrefix string) ([]provider.Sandbox, error) {
	q := listQuery{labels: labels, namePrefix: namePrefix}
	var out []provider.Sandbox
	cursor := ""
	for range maxListPages {
		items, next, err := p.listPage(ctx, q, cursor)
		if err != nil {
			return nil, err
		}
		for i := range items {
			out = append(out, fromListItem(&items[i]))
		}
		if next == "" {
			return out, nil
		}
		cursor = next
	}
	return nil, fmt.Errorf("daytona list: more than %d pages: %w", maxListPages, provider.ErrUnavailable)
}

// Delete asks Daytona to delete the sandbox. Daytona deletes asynchronously:
// the sandbox is `destroying`, renamed, and only later does GET answer 404.
func (p *Provider) Delete(ctx context.Context, id string) error {
	return p.call(ctx, "delete", id, func(ctx context.Context) (*http.Response, error) {
		_, resp, err := p.api.SandboxAPI.DeleteSandbox(ctx, id).Execute()
		return resp, err
	})
}

// Stop asks Daytona to stop the sandbox (it passes through `stopping`).
func (p *Provider) Stop(ctx context.Context, id string) error {
	return p.call(ctx, "stop", id, func(ctx context.Context) (*http.Response, error) {
		_, resp, err := p.api.SandboxAPI.StopSandbox(ctx, id).Execute()
		return resp, err
	})
}

// SetAutoStop sets the idle auto-stop interval; 0 disables auto-stop.
func (p *Provider) SetAutoStop(ctx context.Context, id string, minutes int) error {
	if minutes < 0 {
		return fmt.Errorf("daytona autostop %s: %d minutes: must not be negative", id, minutes)
	}
	return p.call(ctx, "autostop", id, func(ctx context.Context) (*http.Response, error) {
		_, resp, err := p.api.SandboxAPI.SetAutostopInterval(ctx, id, float32(minutes)).Execute()
		return resp, err
	})
}

var _ provider.Labeler = (*Provider)(nil)

// SetLabels replaces every label of the sandbox (PUT /sandbox/{id}/labels,
// a full replace: sandbox.service.ts:2837-2850 at v0.190.0).
func (p *Provider) SetLabels(ctx context.Context, id string, labels map[string]string) error {
	return p.call(ctx, "labels", id, func(ctx context.Context) (*http.Response, error) {
		_, resp, err := p.api.SandboxAPI.ReplaceLabels(ctx, id).SandboxLabels(*apiclient.NewSandboxLabels(labels)).Execute()
		return resp, err
	})
}

// Create makes a sandbox with this name and labels, in the configured target.
// autoStopMinutes nil leaves the server's default (15). It is what a runner
// does; tether itself uses it only in tests and the demo.
func (p *Provider) Create(ctx context.Context, name string, labels map[string]string, autoStopMinutes *int) (provider.Sandbox, error) {
	req := apiclient.NewCreateSandbox()
	if name != "" {
		req.SetName(name)
	}
	if labels != nil {
		req.SetLabels(labels)
	}
	if p.target != "" {
		req.SetTarget(p.target)
	}
	if autoStopMinutes != nil {
		if *autoStopMinutes < 0 {
			return provider.Sandbox{}, fmt.Errorf("daytona create %s: auto-stop %d minutes: must not be negative", name, *autoStopMinutes)
		}
		req.SetAutoStopInterval(int32(*autoStopMinutes))
	}
	var sb *apiclient.Sandbox
	err := p.call(ctx, "create", name, func(ctx context.Context) (*http.Response, error) {
		var resp *http.Response
		var err error
		sb, resp, err = p.api.SandboxAPI.CreateSandbox(ctx).CreateSandbox(*req).Execute()
		return resp, err
	})
	if err != nil {
		return provider.Sandbox{}, err
	}
	return fromSandbox(sb), nil
}

// call runs one API call under its own timeout and turns its failure into
// an error the reaper can act on, with every credential removed. A 403
// "Invalid authentication context" is tried again, up to
// AuthContextRetries times.
func (p *Provider) call(ctx context.Context, op, target string, do func(ctx context.Context) (*http.Response, error)) error {
	for attempt := 0; ; attempt++ {
		err, transient := p.callOnce(ctx, op, do)
		if err == nil {
			return nil
		}
		if transient && attempt < p.authRetries && ctx.Err() == nil {
			p.log.Debug("daytona call answered 403 "+msgInvalidAuthContext+"; trying again", "op", op, "target", p.secrets.Redact(target), "attempt", attempt+1)
			t := time.NewTimer(p.authWait)
			select {
			case <-t.C:
				continue
			case <-ctx.Done():
				t.Stop()
			}
		}
		if transient {
			err = fmt.Errorf("%w (%d attempts)", err, attempt+1)
		}
		what := op // a list of every sandbox, or the check, names none
		if target != "" {
			what += " " + p.secrets.Redact(target)
		}
		err = fmt.Errorf("daytona %s: %w", what, err)
		p.log.Debug("daytona call failed", "op", op, "target", p.secrets.Redact(target), "err", err.Error())
		return err
	}
}

// callOnce makes one attempt; transient reports a 403 "Invalid
// authentication context".
func (p *Provider) callOnce(ctx context.Context, op string, do func(ctx context.Context) (*http.Response, error)) (err error, transient bool) {
	cctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	resp, err := do(context.WithValue(cctx, apiclient.ContextAccessToken, p.token))
	p.noteQuota(resp, time.Now())
	if err == nil {
		return nil, false
	}
	return p.classify(ctx, cctx, op, resp, err)
}

// permissionFor is the Daytona permission each call needs
// (apps/api/src/sandbox/controllers/sandbox.controller.ts:244, 416, 550, 958
// at v0.190.0; reads need none).
var permissionFor = map[string]string{
	"delete": "delete:sandboxes", "stop": "write:sandboxes", "autostop": "write:sandboxes", "create": "write:sandboxes",
}

// classify maps an answer (or its absence) onto the provider's errors.
func (p *Provider) classify(ctx, cctx context.Context, op string, resp *http.Response, err error) (error, bool) {
	if resp == nil || resp.StatusCode < 300 {
		// No answer, or a success whose body did not arrive whole.
		switch {
		case ctx.Err() != nil:
			// The caller's own deadline or cancellation: not ours to retry.
			return fmt.Errorf("no answer: %w", ctx.Err()), false
		case cctx.Err() != nil:
			return fmt.Errorf("%w: no answer within %s", provider.ErrUnavailable, p.timeout), false
		case resp == nil:
			return apicall.NoAnswer(err, EnvAPIURL, p.secrets), false
		}
		return &apicall.Error{Msg: fmt.Sprintf("HTTP %d with an unreadable body: %s", resp.StatusCode, p.secrets.Redact(err.Error())), Kind: provider.ErrUnavailable}, false
	}
	text := p.serverText(resp)
	msg := withStatus(resp.StatusCode, text)
	code := resp.StatusCode
	switch {
	case code == http.StatusNotFound && accountRead[op]:
		// No Daytona answers 404 to a list of sandboxes: the URL is not
		// the API's (a path mistyped, /api left off). A configuration
		// error, never "sandbox not found".
		return &apicall.Error{Msg: msg + ": " + wrongURLFix, Kind: provider.ErrMisconfigured}, false
	case code == http.StatusNotFound:
		return &apicall.Error{Msg: msg, Kind: provider.ErrNotFound}, false
	case code == http.StatusConflict:
		return &apicall.Error{Msg: msg, Kind: provider.ErrConflict}, false
	case code == http.StatusTooManyRequests:
		return fmt.Errorf("%w: %s", rateLimit(resp.Header, time.Now()), msg), false
	case code == http.StatusForbidden && text == msgInvalidAuthContext:
		return &apicall.Error{Msg: msg + ": " + refusedKeyFix, Kind: provider.ErrUnauthorized}, true
	case code == http.StatusForbidden && text == msgAccessDenied:
		return &provider.PermissionError{Op: op, Permission: permissionFor[op], Message: msg}, false
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return &apicall.Error{Msg: msg + ": " + refusedKeyFix, Kind: provider.ErrUnauthorized}, false
	case code >= 500 || code == http.StatusRequestTimeout:
		return &apicall.Error{Msg: msg, Kind: provider.ErrUnavailable}, false
	case code == http.StatusBadRequest:
		// apps/api/src/sandbox/services/sandbox.service.ts:163-167, 2160-2162.
		lower := strings.ToLower(text)
		switch {
		case strings.Contains(lower, "not in a stoppable state"):
			return &apicall.Error{Msg: msg, Kind: provider.ErrNotStoppable}, false
		case strings.Contains(lower, "in an errored state"):
			return &apicall.Error{Msg: msg, Kind: provider.ErrErrored}, false
		case strings.Contains(lower, "active fork children"):
			// sandbox.service.ts:2020-2029.
			return &apicall.Error{Msg: msg, Kind: provider.ErrHasForks}, false
		}
		return &apicall.Error{Msg: msg, Kind: provider.ErrRefused}, false
	}
	return &apicall.Error{Msg: msg}, false
}

// What a refused key and a wrong URL say to fix, wherever they show: the
// start-up check, doctor, a sweep, a drain.
var (
	refusedKeyFix = "check " + EnvAPIKey + " (or " + EnvJWTToken + " and " + EnvOrganizationID + "), and that " + EnvAPIURL + " is the API the credentials belong to"
	wrongURLFix   = EnvAPIURL + " does not look like the Daytona API (it usually ends in /api)"
)

// accountRead are the calls that read the account, not one sandbox: a 404
// to them is a wrong URL.
var accountRead = map[string]bool{"list": true, "check": true}

func withStatus(code int, text string) string {
	status := "HTTP " + strconv.Itoa(code)
	if text == "" {
		return status
	}
	return status + ": " + text
}

// serverText is the server's message, redacted and bounded.
func (p *Provider) serverText(resp *http.Response) string {
	if resp.Body == nil {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e struct {
		Message json.RawMessage `json:"message"`
	}
	text := strings.TrimSpace(string(b))
	if json.Unmarshal(b, &e) == nil && len(e.Message) > 0 {
		var s string
		if json.Unmarshal(e.Message, &s) == nil {
			text = s
		} else {
			text = string(e.Message) // NestJS validation errors are arrays
		}
	}
	text = p.secrets.Redact(text)
	if len(text) > maxErrorMessage {
		text = text[:maxErrorMessage] + "…"
	}
	return text
}

// Daytona's rate-limit headers. A throttler's 429 carries
// Retry-After-<throttler> in seconds; allowed answers carry
// X-RateLimit-{Limit,Remaining,Reset}-<throttler>; only the failed-auth
// throttler sends a plain Retry-After (@nestjs/throttler's guard, v6
// handleRequest; apps/api/src/common/utils/rate-limit-headers.util.ts:24-33
// at v0.190.0).
const (
	hdrRetryAfter = "retry-after"
	hdrRemaining  = "x-ratelimit-remaining-"
	hdrReset      = "x-ratelimit-reset-"
)

// rateLimit reads a 429's headers: the longest Retry-After-<throttler> (or
// a plain Retry-After), else the reset of a throttler whose remaining is 0.
func rateLimit(h http.Header, now time.Time) *provider.RateLimitError {
	rl := &provider.RateLimitError{}
	var plain time.Duration
	for k, vs := range h {
		k = strings.ToLower(k)
		if len(vs) == 0 {
			continue
		}
		if k == hdrRetryAfter {
			plain = apicall.RetryAfter(vs[0], now)
		} else if name, ok := strings.CutPrefix(k, hdrRetryAfter+"-"); ok {
			if d := apicall.RetryAfter(vs[0], now); d > rl.RetryAfter {
				rl.RetryAfter, rl.Limiter = d, name
			}
		}
	}
	if rl.RetryAfter > 0 {
		rl.RetryAfter = max(rl.RetryAfter, plain)
		return rl
	}
	if plain > 0 {
		rl.RetryAfter = plain
		if h.Get("X-RateLimit-Remaining-failed-auth") != "" {
			rl.Limiter = "failed-auth"
		}
		return rl
	}
	for k, vs := range h {
		k = strings.ToLower(k)
		if name, ok := strings.CutPrefix(k, hdrRemaining); ok && len(vs) > 0 && strings.TrimSpace(vs[0]) == "0" {
			if d := apicall.RetryAfter(h.Get(hdrReset+name), now); d > rl.RetryAfter {
				rl.RetryAfter, rl.Limiter = d, name
			}
		}
	}
	return rl
}

// noteQuota remembers, per throttler, until when an answer said its quota
// is spent: a 429's Retry-After-<throttler> (the organization is refused
// until then, and every request it sends meanwhile counts against the
// window after: @nestjs/throttler's storage counts a blocked tracker's
// hits too), or an allowed answer's X-RateLimit-Remaining-<throttler>: 0,
// reset in X-RateLimit-Reset-<throttler> seconds. Every call of this
// Provider that counts against the throttler then waits (ExhaustedUntil),
// not only the one refused. An answer with some remaining does not clear
// the mark: answers of one window arrive out of order, and the mark ends by
// itself.
func (p *Provider) noteQuota(resp *http.Response, now time.Time) {
	if resp == nil {
		return
	}
	for k, vs := range resp.Header {
		if len(vs) == 0 {
			continue
		}
		k = strings.ToLower(k)
		if name, ok := strings.CutPrefix(k, hdrRetryAfter+"-"); ok && resp.StatusCode == http.StatusTooManyRequests {
			p.blocked(name, now, apicall.RetryAfter(vs[0], now))
			continue
		}
		if name, ok := strings.CutPrefix(k, hdrRemaining); ok && strings.TrimSpace(vs[0]) == "0" {
			p.spend(name, now, apicall.RetryAfter(resp.Header.Get(hdrReset+name), now))
		}
	}
}

// spend marks throttler's quota spent for d from now (a window's reset).
func (p *Provider) spend(throttler string, now time.Time, d time.Duration) {
	if d <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if until := now.Add(d); until.After(p.exhausted[throttler]) {
		p.exhausted[throttler] = until
	}
}

// blocked marks throttler's quota refused for d from now (a 429's
// Retry-After). Every request refused within one block learns the same
// end, rounded up to whole seconds from when it was refused, so each
// answer bounds the end from above: while an earlier block mark stands,
// the earliest bound is kept, so that this Provider's calls come back
// nearer the block's true end (a window's worth of quota starts with the
// first request after it, and every request before counts against it).
func (p *Provider) blocked(throttler string, now time.Time, d time.Duration) {
	if d <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	until := now.Add(d)
	if cur, ok := p.block[throttler]; ok && now.Before(cur) && until.After(cur) {
		return // the same block: the earlier bound holds
	}
	p.block[throttler] = until
}

// throttlerOf is the Daytona throttler a kind of call counts against
// (apps/api/src/sandbox/controllers/sandbox.controller.ts:399-400, 527-528
// at v0.190.0: delete and stop skip `authenticated` for `sandbox-lifecycle`).
func throttlerOf(kind string) string {
	switch kind {
	case provider.CallDelete, provider.CallStop:
		return "sandbox-lifecycle"
	}
	return "authenticated"
}

// Quota is the throttler calls of this kind count against.
func (p *Provider) Quota(kind string) string { return throttlerOf(kind) }

// ExhaustedUntil is when the quota of this kind of call is known to be
// available again: a 429's Retry-After, or the reset an answer announced
// with a remaining of 0 (zero once that has passed).
func (p *Provider) ExhaustedUntil(kind string) time.Time {
	name := throttlerOf(kind)
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	var until time.Time
	for _, m := range []map[string]time.Time{p.exhausted, p.block} {
		t, ok := m[name]
		if ok && !now.Before(t) {
			delete(m, name)
			continue
		}
		if t.After(until) {
			until = t
		}
	}
	return until
}

func fromSandbox(sb *apiclient.Sandbox) provider.Sandbox {
	return provider.Sandbox{
		ID:                sb.GetId(),
		Name:              sb.GetName(),
		State:             mapState(sb.GetState()),
		Labels:            sb.GetLabels(),
		AutoStopMinutes:   int(sb.GetAutoStopInterval()),
		AutoDeleteMinutes: autoDelete(sb.AutoDeleteInterval),
		CreatedAt:         parseTime(sb.GetCreatedAt()),
	}
}

func fromListItem(it *apiclient.SandboxListItem) provider.Sandbox {
	return provider.Sandbox{
		ID:                it.GetId(),
		Name:              it.GetName(),
		State:             mapState(it.GetState()),
		Labels:            it.GetLabels(),
		AutoStopMinutes:   int(it.GetAutoStopInterval()),
		AutoDeleteMinutes: autoDelete(it.AutoDeleteInterval),
		CreatedAt:         parseTime(it.GetCreatedAt()),
	}
}

// autoDelete is a sandbox's auto-delete interval; absent is Daytona's
// default, never.
func autoDelete(v *float32) int {
	if v == nil || *v < 0 {
		return -1
	}
	return int(*v)
}

// mapState maps Daytona's state onto the provider's words. Daytona's own
// words are the provider's (started, stopped, archived, destroying,
// destroyed, ...); a state this client version does not know is "unknown".
func mapState(s apiclient.SandboxState) string {
	switch s {
	case "":
		return "unknown"
	case apiclient.SANDBOXSTATE_UNKNOWN_DEFAULT_OPEN_API:
		return "unknown"
	}
	return string(s)
}

func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t
}
