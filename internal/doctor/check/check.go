// Package check is the vocabulary of `tether doctor`'s checks, shared by
// the doctor (internal/doctor) and each provider's checks (the registry's
// Kind.Doctor, internal/providers/<name>_doctor.go): a step and its
// verdict, how each is reported as it ends and each call bounded, and
// what every provider's checks say alike (a masked credential, what kind
// of failure an error is, TLS with the CA bundle in use).
package check

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/tether-run/tether/provider"
)

// Verdict is how one step went.
type Verdict string

// Verdicts. Only Fail makes the whole check fail; Warn is something to
// look at that does not stop tether from working.
const (
	Pass Verdict = "ok"
	Warn Verdict = "warn"
	Fail Verdict = "FAIL"
	Skip Verdict = "skip"
)

// Step is one check, or one step of the live round trip.
type Step struct {
	Name    string        `json:"name"`
	Verdict Verdict       `json:"verdict"`
	Detail  string        `json:"detail"`
	Latency time.Duration `json:"latency_ns,omitempty"`
}

// DefaultCallTimeout bounds each call of the checks.
const DefaultCallTimeout = 10 * time.Second

// Reporter is how checks report their steps, each as it ends, and bound
// their calls.
type Reporter struct {
	// Report is called with each step as it ends.
	Report func(Step)
	// CallTimeout bounds each call (DefaultCallTimeout if zero).
	CallTimeout time.Duration
	// Now is the clock (time.Now if nil).
	Now func() time.Time
}

// Step reports s.
func (r *Reporter) Step(s Step) { r.Report(s) }

// Timed runs f and reports its step with the time it took.
func (r *Reporter) Timed(name string, f func() (Verdict, string)) Verdict {
	start := time.Now()
	v, detail := f()
	r.Report(Step{Name: name, Verdict: v, Detail: detail, Latency: time.Since(start)})
	return v
}

// Call is ctx bounded for one call.
func (r *Reporter) Call(ctx context.Context) (context.Context, context.CancelFunc) {
	d := r.CallTimeout
	if d <= 0 {
		d = DefaultCallTimeout
	}
	return context.WithTimeout(ctx, d)
}

// Clock is the time now.
func (r *Reporter) Clock() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// MaskKey shows enough of a credential to tell which one it is: its first
// four and last three characters when it is long enough to be a key.
func MaskKey(k string) string {
	if len(k) < 16 {
		return fmt.Sprintf("%d characters", len(k))
	}
	return fmt.Sprintf("%s…%s, %d characters", k[:4], k[len(k)-3:], len(k))
}

// Why is err with what kind of failure it is, for a reader deciding what
// to change.
func Why(err error) string {
	switch {
	case errors.Is(err, provider.ErrUnreachable):
		return "unreachable: " + err.Error()
	case errors.Is(err, provider.ErrPermission):
		return err.Error()
	case errors.Is(err, provider.ErrUnauthorized):
		return "the credentials are refused: " + err.Error()
	case errors.Is(err, provider.ErrMisconfigured):
		return "misconfigured: " + err.Error()
	case errors.Is(err, provider.ErrRateLimited):
		return "rate limited, try again later (the call was refused before it was judged): " + err.Error()
	}
	return err.Error()
}

// Loopback reports whether the URL's host is this machine.
func Loopback(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	h := u.Hostname()
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// PlainHTTPAway reports whether an API URL is plain http to another
// machine: a key sent there crosses the network unencrypted.
func PlainHTTPAway(raw string) bool {
	return strings.HasPrefix(strings.ToLower(raw), "http://") && !Loopback(raw)
}

// caBundle says which CA certificates Go verifies servers with here.
func caBundle() string {
	var parts []string
	for _, v := range []string{"SSL_CERT_FILE", "SSL_CERT_DIR"} {
		if s := os.Getenv(v); s != "" {
			parts = append(parts, v+"="+s)
		}
	}
	if len(parts) == 0 {
		return "the system's CA certificates"
	}
	return strings.Join(parts, ", ")
}

// TLS dials the host of apiURL with the CA bundle tether would use and
// reports the step name: the protocol, the certificate's subject, issuer
// and end. An http URL is a skip.
func TLS(ctx context.Context, r *Reporter, name, apiURL string) {
	u, err := url.Parse(apiURL)
	if err != nil || u.Scheme != "https" {
		r.Step(Step{Name: name, Verdict: Skip, Detail: "the API URL is http: no TLS"})
		return
	}
	r.Timed(name, func() (Verdict, string) {
		bundle := caBundle()
		pool, err := x509.SystemCertPool()
		if err != nil || pool.Equal(x509.NewCertPool()) {
			return Fail, fmt.Sprintf("no CA certificates found (%s; a FROM scratch image?): install a CA bundle (e.g. Debian's ca-certificates) or set SSL_CERT_FILE to one", bundle)
		}
		host := u.Host
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), "443")
		}
		cctx, cancel := r.Call(ctx)
		defer cancel()
		d := tls.Dialer{Config: &tls.Config{ServerName: u.Hostname(), RootCAs: pool}}
		c, err := d.DialContext(cctx, "tcp", host)
		if err != nil {
			return Fail, fmt.Sprintf("%s with %s: %v", host, bundle, err)
		}
		defer c.Close()
		st := c.(*tls.Conn).ConnectionState()
		leaf := st.PeerCertificates[0]
		left := leaf.NotAfter.Sub(r.Clock())
		detail := fmt.Sprintf("%s, verified with %s; certificate for %s from %s, valid until %s",
			tls.VersionName(st.Version), bundle, u.Hostname(), issuer(leaf), leaf.NotAfter.UTC().Format(time.DateOnly))
		if left < 14*24*time.Hour {
			return Warn, detail + fmt.Sprintf(" (in %s)", left.Round(time.Hour))
		}
		return Pass, detail
	})
}

func issuer(c *x509.Certificate) string {
	if c.Issuer.CommonName != "" {
		return c.Issuer.CommonName
	}
	if len(c.Issuer.Organization) > 0 {
		return c.Issuer.Organization[0]
	}
	return c.Issuer.String()
}

// Redact hides secret in s.
func Redact(s, secret string) string {
	if len(secret) < 8 {
		return s
	}
	return strings.ReplaceAll(s, secret, "[REDACTED]")
}
