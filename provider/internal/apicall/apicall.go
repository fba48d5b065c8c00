// Package apicall is what the providers' HTTP clients (daytona, e2b, docker)
// share about a call that failed: an error whose message carries no
// credential, what to check when a call got no answer (TLS, DNS, nothing
// listening) or would fail to verify the server, and a server's
// Retry-After. Which answers mean what is each provider's own.
package apicall

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tether-run/tether/provider"
)

// Error is a failure whose message is already free of credentials; it
// matches its provider sentinel (Kind, or none) with errors.Is.
type Error struct {
	Msg  string
	Kind error // a provider sentinel, or nil
}

func (e *Error) Error() string {
	if e.Kind == nil {
		return e.Msg
	}
	return e.Kind.Error() + ": " + e.Msg
}

func (e *Error) Unwrap() error { return e.Kind }

// Secrets are a provider's credentials in every form a message may show
// them: as given, query-escaped and path-escaped.
type Secrets []string

// Add adds secret, unless it is empty, in each of its forms.
func (s *Secrets) Add(secret string) {
	if secret != "" {
		*s = append(*s, secret, url.QueryEscape(secret), url.PathEscape(secret))
	}
}

// Redact removes every secret from text.
func (s Secrets) Redact(text string) string {
	for _, secret := range s {
		if secret != "" {
			text = strings.ReplaceAll(text, secret, "[REDACTED]")
		}
	}
	return text
}

// RedactURL is s without a password, for messages and logs.
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// NoAnswer is a call that got no answer, err, as a provider error that
// says what to check (urlEnv names the variable of the API URL): a
// configuration error when TLS refused the server (retrying cannot help),
// else a transient failure, which is also unreachable
// (provider.Unreachable) when there was no connection at all: still
// retried in a drain under way, but a command that has done nothing yet
// fails fast.
func NoAnswer(err error, urlEnv string, secrets Secrets) error {
	msg := "no answer: " + secrets.Redact(err.Error())
	if why := tlsProblem(err, urlEnv); why != "" {
		return &Error{Msg: msg + " (" + why + ")", Kind: provider.ErrMisconfigured}
	}
	var dns *net.DNSError
	switch {
	case errors.As(err, &dns) && dns.IsNotFound:
		return provider.Unreachable(&Error{Msg: msg + " (the host of " + urlEnv + " does not resolve)", Kind: provider.ErrUnavailable})
	case errors.Is(err, syscall.ECONNREFUSED):
		return provider.Unreachable(&Error{Msg: msg + " (nothing listens at " + urlEnv + "'s host and port)", Kind: provider.ErrUnavailable})
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return provider.Unreachable(&Error{Msg: msg, Kind: provider.ErrUnavailable})
	}
	return &Error{Msg: msg, Kind: provider.ErrUnavailable}
}

// tlsProblem says what is wrong when TLS refused the server, or "".
func tlsProblem(err error, urlEnv string) string {
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
		return "the server's certificate is not valid for the host of " + urlEnv
	case errors.As(err, &invalid):
		return "the server's certificate is invalid (expired, or not yet valid)"
	case errors.As(err, &record), strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return "the server does not speak TLS: " + urlEnv + " may need http://, or another port"
	}
	return ""
}

// Untrusted says why calls to an https rawURL through hc would fail to
// verify the server: they use the system's CA certificates, and the
// system has none, or they cannot be read. "" when calls would not fail
// so. Loading the certificates takes tens of milliseconds: it belongs to
// a provider's Check, off the child's start.
func Untrusted(rawURL string, hc *http.Client) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "https" || !usesSystemRoots(hc) {
		return ""
	}
	pool, err := x509.SystemCertPool()
	if err == nil && !pool.Equal(x509.NewCertPool()) {
		return ""
	}
	if err != nil {
		return "the system's CA certificates cannot be read: " + err.Error()
	}
	return "no CA certificates were found on this system (a FROM scratch image?)"
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

// MaxRetryAfter bounds a server's rate-limit hint: a longer one (or a
// garbled huge number) is read as this.
const MaxRetryAfter = time.Hour

// RetryAfter reads a header of seconds (Retry-After, a rate limit's
// reset), or an HTTP date.
func RetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if secs <= 0 || math.IsNaN(secs) {
			return 0
		}
		if secs >= MaxRetryAfter.Seconds() {
			return MaxRetryAfter
		}
		return time.Duration(secs * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return min(d, MaxRetryAfter)
		}
	}
	return 0
}

// NewRequest is one call of a provider's JSON API: method on base+path
// with the query q, the body (when not nil) encoded as JSON, and the
// User-Agent "tether" that the simulators' records (and a server's logs)
// tell tether's calls by. A URL that cannot be made is a configuration
// error (provider.ErrMisconfigured), its text passed through redact.
func NewRequest(ctx context.Context, method, base, path string, q url.Values, body any, redact func(string) string) (*http.Request, error) {
	u := base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", provider.ErrMisconfigured, redact(err.Error()))
	}
	req.Header.Set("User-Agent", "tether")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}
