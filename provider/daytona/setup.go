package daytona

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"

	"github.com/tether-run/tether/provider"
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
	if len(cfg.Servers) == 0 || !usesSystemRoots(cfg.HTTPClient) {
		return nil
	}
	u, err := url.Parse(cfg.Servers[0].URL)
	if err != nil || u.Scheme != "https" {
		return nil
	}
	pool, err := x509.SystemCertPool()
	if err == nil && !pool.Equal(x509.NewCertPool()) {
		return nil
	}
	why := "no CA certificates were found on this system (a FROM scratch image?)"
	if err != nil {
		why = "the system's CA certificates cannot be read: " + err.Error()
	}
	variable := p.urlFrom
	if variable == "" {
		variable, _ = apiURLFromEnv()
	}
	if variable == "" {
		variable = "the default " + EnvAPIURL
	}
	return &redactedError{kind: provider.ErrMisconfigured,
		msg: fmt.Sprintf("%s is https but %s: install a CA bundle (e.g. Debian's ca-certificates) or set SSL_CERT_FILE to one", variable, why)}
}

// usesSystemRoots reports whether calls through hc verify servers with the
// system's CA certificates (no RootCAs of their own).
func usesSystemRoots(hc *http.Client) bool {
	if hc == nil {
		return true
	}
	switch t := hc.Transport.(type) {
	case nil:
		return true
	case *http.Transport:
		return t.TLSClientConfig == nil || t.TLSClientConfig.RootCAs == nil
	}
	return false
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
	switch {
	case err == nil:
		return nil
	case errors.Is(err, provider.ErrPermission):
		return err // it names the permission
	case errors.Is(err, provider.ErrUnauthorized):
		return fmt.Errorf("%w: check %s (or %s and %s), and that %s is the API the credentials belong to", err, EnvAPIKey, EnvJWTToken, EnvOrganizationID, EnvAPIURL)
	case errors.Is(err, provider.ErrNotFound):
		return fmt.Errorf("%w: %s does not look like the Daytona API (it usually ends in /api)", err, EnvAPIURL)
	}
	return err
}

// transportError is a call that got no answer: a configuration error when
// TLS refused the server (retrying cannot help), else a transient failure;
// either way with a hint of what to check.
func (p *Provider) transportError(err error) error {
	msg := "no answer: " + p.redact(err.Error())
	if why := tlsProblem(err); why != "" {
		return &redactedError{msg: msg + " (" + why + ")", kind: provider.ErrMisconfigured}
	}
	var dns *net.DNSError
	switch {
	case errors.As(err, &dns) && dns.IsNotFound:
		msg += " (the host of " + EnvAPIURL + " does not resolve)"
		return provider.Unreachable(&redactedError{msg: msg, kind: provider.ErrUnavailable})
	case errors.Is(err, syscall.ECONNREFUSED):
		msg += " (nothing listens at " + EnvAPIURL + "'s host and port)"
		return provider.Unreachable(&redactedError{msg: msg, kind: provider.ErrUnavailable})
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return provider.Unreachable(&redactedError{msg: msg, kind: provider.ErrUnavailable})
	}
	return &redactedError{msg: msg, kind: provider.ErrUnavailable}
}

// tlsProblem says what is wrong when TLS refused the server, or "".
func tlsProblem(err error) string {
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		record   tls.RecordHeaderError
	)
	switch {
	case errors.As(err, &unknown):
		return "the server's certificate is signed by an authority this system does not trust: install a CA bundle, or set SSL_CERT_FILE to one that has it"
	case errors.As(err, &hostname):
		return "the server's certificate is not valid for the host of " + EnvAPIURL
	case errors.As(err, &invalid):
		return "the server's certificate is invalid (expired, or not yet valid)"
	case errors.As(err, &record), strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return "the server does not speak TLS: " + EnvAPIURL + " may need http://, or another port"
	}
	return ""
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
