package e2b

import (
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/tether-run/tether/provider"
)

// A broken E2B setup — no key, a malformed E2B_API_URL or E2B_DOMAIN, an
// https URL on a system without CA certificates — would otherwise stay
// silent until the drain, when every sandbox has already leaked.
// SetupFromEnv says what is wrong with the environment, each problem
// naming the variable to set; Check finds the rest with one call.

// Setup is tether's E2B setup as read from the environment, before any call.
type Setup struct {
	// Provider is nil when none could be built.
	Provider *Provider
	// APIURL is the API URL the environment names (the default when it
	// names none), whether or not it is one tether can call.
	APIURL string
	// Problems say why there is no Provider, each naming the variable to set.
	Problems []error
}

// Configured reports whether an environment (getenv) names an E2B setup:
// E2B_API_KEY, E2B_API_URL or E2B_DOMAIN set. Without any of them E2B is
// simply not used.
func Configured(getenv func(string) string) bool {
	for _, v := range []string{EnvAPIKey, EnvAPIURL, EnvDomain} {
		if getenv(v) != "" {
			return true
		}
	}
	return false
}

// SetupFromEnv reads the environment as ConfigFromEnv does and reports
// every problem it can see without a call.
func SetupFromEnv(log *slog.Logger) Setup { return SetupFrom(os.Getenv, log) }

// SetupFrom is SetupFromEnv reading the variables with getenv.
func SetupFrom(getenv func(string) string, log *slog.Logger) Setup {
	var s Setup
	if getenv(EnvAPIKey) == "" {
		s.Problems = append(s.Problems, errors.New("no E2B credentials: set "+EnvAPIKey))
	}
	cfg := Config{APIKey: getenv(EnvAPIKey), APIURL: getenv(EnvAPIURL), Domain: getenv(EnvDomain), Logger: log}
	variable := URLVariable(getenv)
	if variable == EnvDebug {
		cfg.APIURL = DebugAPIURL
	}
	s.APIURL = redactURL(cfg.apiURL())
	badDomain := variable == EnvDomain && strings.ContainsAny(cfg.Domain, "/?#@: ")
	if u, err := url.Parse(cfg.apiURL()); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || badDomain {
		s.Problems = append(s.Problems, fmt.Errorf("%s: %q is not an API URL tether can call (want http(s)://host[/path], or a bare domain in %s)", variable, redactURL(cfg.apiURL()), EnvDomain))
	}
	if len(s.Problems) > 0 {
		return s
	}
	p, err := New(cfg)
	if err != nil {
		s.Problems = append(s.Problems, fmt.Errorf("%s: %w", variable, err))
		return s
	}
	s.Provider = p
	return s
}

// URLVariable is the variable the API URL comes from, in the SDKs'
// precedence: E2B_API_URL, else E2B_DEBUG=true (http://localhost:3000),
// else E2B_DOMAIN (https://api.<domain>, e2b.app when it is unset too).
func URLVariable(getenv func(string) string) string {
	switch {
	case getenv(EnvAPIURL) != "":
		return EnvAPIURL
	case strings.EqualFold(getenv(EnvDebug), "true"):
		return EnvDebug
	}
	return EnvDomain
}

// Err is the setup's problems as one error, or nil.
func (s Setup) Err() error { return errors.Join(s.Problems...) }

// trustProblem reports an https API URL, called with the system's CA
// certificates, on a system that has none: every call would fail verifying
// the server.
func (p *Provider) trustProblem() error {
	u, err := url.Parse(p.base)
	if err != nil || u.Scheme != "https" || !usesSystemRoots(p.hc) {
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
	return &redactedError{kind: provider.ErrMisconfigured,
		msg: fmt.Sprintf("the E2B API URL %s is https but %s: install a CA bundle (e.g. Debian's ca-certificates) or set SSL_CERT_FILE to one", redactURL(p.base), why)}
}

// usesSystemRoots reports whether calls through hc verify servers with the
// system's CA certificates (no RootCAs of their own).
func usesSystemRoots(hc *http.Client) bool {
	switch t := hc.Transport.(type) {
	case nil:
		return true
	case *http.Transport:
		return t.TLSClientConfig == nil || t.TLSClientConfig.RootCAs == nil
	}
	return false
}
