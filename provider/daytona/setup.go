package daytona

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/internal/apicall"
)

// A broken Daytona setup — no credentials, a malformed DAYTONA_API_URL, an
// https URL on a system without CA certificates (a FROM scratch image), a
// wrong key — would otherwise stay silent until the drain, when every
// sandbox has already leaked. SetupFromEnv says what is wrong with the
// environment, each problem naming the variable to set; Check finds the
// rest (CA certificates, credentials, DNS, TLS) with one cheap
// authenticated call right after start.

// Setup is tether's Daytona setup as read from the environment, before any
// call.
type Setup struct {
	// Provider is nil when none could be built (no credentials, a
	// malformed URL).
	Provider *Provider
	// Problems say why there is no Provider, each naming the variable to
	// set. Empty when the environment looks right; Check tells the rest.
	Problems []error
}

// SetupFromEnv reads the environment as ConfigFromEnv does and reports
// every problem it can see without a call.
func SetupFromEnv(log *slog.Logger) Setup { return SetupFrom(os.Getenv, log) }

// SetupFrom is SetupFromEnv with each variable read by getenv, as
// ConfigFrom reads them.
func SetupFrom(getenv func(string) string, log *slog.Logger) Setup {
	var s Setup
	urlVar, rawURL := apiURLFrom(getenv)
	urlErr := checkAPIURL(urlVar, rawURL)
	if urlErr != nil {
		s.Problems = append(s.Problems, urlErr)
	}
	cfg, err := ConfigFrom(getenv)
	if err != nil {
		s.Problems = append(s.Problems, err)
		return s
	}
	if urlErr != nil {
		return s
	}
	cfg.Logger = log
	p, err := New(cfg)
	if err != nil {
		s.Problems = append(s.Problems, fmt.Errorf("%s: %w", urlVar, err))
		return s
	}
	p.urlFrom = urlVar
	s.Provider = p
	return s
}

// apiURLFromEnv is the API URL ConfigFromEnv would use and the variable it
// came from (empty when it is the default).
func apiURLFromEnv() (variable, value string) { return apiURLFrom(os.Getenv) }

// apiURLFrom is apiURLFromEnv with the variables read by getenv.
func apiURLFrom(getenv func(string) string) (variable, value string) {
	for _, v := range []string{EnvAPIURL, EnvServerURL} {
		if s := getenv(v); s != "" {
			return v, s
		}
	}
	return "", DefaultAPIURL
}

// checkAPIURL applies New's rule for the URL (http or https, a host) and
// says which variable to fix.
func checkAPIURL(variable, raw string) error {
	u, err := url.Parse(raw)
	if err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
		return nil
	}
	if variable == "" {
		variable = EnvAPIURL
	}
	return fmt.Errorf("%s=%q is %w: set it to the Daytona API's http(s)://host/path, e.g. %s", variable, shownURL(raw), ErrBadAPIURL, DefaultAPIURL)
}

// ErrBadAPIURL: the API URL of the environment is not one tether can call.
var ErrBadAPIURL = errors.New("not a URL tether can call")

// shownURL is raw as the user gave it (not re-encoded, so they recognise
// it), with a password in it, if any, masked.
func shownURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	if pw, ok := u.User.Password(); ok && pw != "" {
		for _, form := range []string{pw, url.PathEscape(pw), url.QueryEscape(pw)} {
			raw = strings.ReplaceAll(raw, ":"+form+"@", ":xxxxx@")
		}
	}
	return raw
}

// trustProblem reports an https API URL, called with the system's CA
// certificates, on a system that has none: every call would fail verifying
// the server. Loading them takes tens of milliseconds, so it is part of
// Check, off the child's start.
func (p *Provider) trustProblem() error {
	cfg := p.api.GetConfig()
	if len(cfg.Servers) == 0 {
		return nil
	}
	why := apicall.Untrusted(cfg.Servers[0].URL, cfg.HTTPClient)
	if why == "" {
		return nil
	}
	variable := p.urlFrom
	if variable == "" {
		variable, _ = apiURLFromEnv()
	}
	if variable == "" {
		variable = "the default " + EnvAPIURL
	}
	return &apicall.Error{Kind: provider.ErrMisconfigured,
		Msg: fmt.Sprintf("%s is https but %s: install a CA bundle (e.g. Debian's ca-certificates) or set SSL_CERT_FILE to one", variable, why)}
}

// Check looks first at what needs no call (an https URL on a system without
// CA certificates), then makes one cheap authenticated read (a list of at
// most one sandbox), and says what to fix when either fails: the
// credentials (401/403), the URL (404, DNS), the certificates (TLS).
func (p *Provider) Check(ctx context.Context) error {
	if err := p.trustProblem(); err != nil {
		return fmt.Errorf("daytona check: %w", err)
	}
	err := p.call(ctx, "check", "GET /sandbox", func(ctx context.Context) (*http.Response, error) {
		_, resp, err := p.api.SandboxAPI.ListSandboxes(ctx).Limit(1).Execute()
		return resp, err
	})
	// A refused key and a wrong URL say what to fix (classify), as every
	// call's error does; a missing permission names the permission.
	return err
}

// Err is the setup's problems as one error on one line, or nil.
func (s Setup) Err() error {
	switch len(s.Problems) {
	case 0:
		return nil
	case 1:
		return s.Problems[0]
	}
	msgs := make([]string, len(s.Problems))
	for i, p := range s.Problems {
		msgs[i] = p.Error()
	}
	return &setupError{msg: strings.Join(msgs, "; "), errs: s.Problems}
}

type setupError struct {
	msg  string
	errs []error
}

func (e *setupError) Error() string   { return e.msg }
func (e *setupError) Unwrap() []error { return e.errs }
