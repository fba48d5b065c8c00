package doctor

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tether-run/tether/journal"
)

// The permissions tether needs on an API key
// (provider/daytona classifies a 403 "Access denied" by them).
const (
	permDelete = "delete:sandboxes"
	permWrite  = "write:sandboxes"
)

func loopback(raw string) bool {
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

// tls dials the API's host with the CA bundle tether would use and says
// what it found: the protocol, the certificate's subject, issuer and end.
func (r *run) tls(ctx context.Context) {
	u, err := url.Parse(r.cfg.APIURL)
	if err != nil || u.Scheme != "https" {
		r.report(Step{Name: "tls", Verdict: Skip, Detail: "the API URL is http: no TLS"})
		return
	}
	r.timed("tls", func() (Verdict, string) {
		bundle := caBundle()
		pool, err := x509.SystemCertPool()
		if err != nil || pool.Equal(x509.NewCertPool()) {
			return Fail, fmt.Sprintf("no CA certificates found (%s; a FROM scratch image?): install a CA bundle (e.g. Debian's ca-certificates) or set SSL_CERT_FILE to one", bundle)
		}
		host := u.Host
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), "443")
		}
		cctx, cancel := context.WithTimeout(ctx, orDefault(r.o.CallTimeout, DefaultCallTimeout))
		defer cancel()
		d := tls.Dialer{Config: &tls.Config{ServerName: u.Hostname(), RootCAs: pool}}
		c, err := d.DialContext(cctx, "tcp", host)
		if err != nil {
			return Fail, fmt.Sprintf("%s with %s: %v", host, bundle, err)
		}
		defer c.Close()
		st := c.(*tls.Conn).ConnectionState()
		leaf := st.PeerCertificates[0]
		left := leaf.NotAfter.Sub(r.now())
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

// apiKeyJSON is the part of Daytona's ApiKeyListDto the check reads.
type apiKeyJSON struct {
	Name        string   `json:"name"`
	Value       string   `json:"value"`
	Permissions []string `json:"permissions"`
	ExpiresAt   *string  `json:"expiresAt"`
}

// permissions reads the key's own record (GET /api-keys/current, which
// needs no permission; api-key.controller.ts:99-117 at v0.190.0) and checks
// it carries what tether calls need: delete:sandboxes for every delete,
// write:sandboxes for the auto-stop backstop, --on-drain stop and lease
// renewals (sandbox.controller.ts:244, 416, 550, 958). A JWT acts with its
// user's role, which this route does not show.
func (r *run) permissions(ctx context.Context) {
	if r.cfg.APIKey == "" {
		r.report(Step{Name: "permissions", Verdict: Skip, Detail: "a JWT acts with its user's role in the organization, which Daytona does not show to it"})
		return
	}
	r.timed("permissions", func() (Verdict, string) {
		cctx, cancel := context.WithTimeout(ctx, orDefault(r.o.CallTimeout, DefaultCallTimeout))
		defer cancel()
		req, err := http.NewRequestWithContext(cctx, http.MethodGet, strings.TrimRight(r.cfg.APIURL, "/")+"/api-keys/current", nil)
		if err != nil {
			return Fail, err.Error()
		}
		req.Header.Set("Authorization", "Bearer "+r.cfg.APIKey)
		req.Header.Set("User-Agent", "tether")
		resp, err := (&http.Client{Transport: r.rec}).Do(req)
		if err != nil {
			return Warn, "the key's permissions could not be read: " + redact(err.Error(), r.cfg.APIKey)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if resp.StatusCode != http.StatusOK {
			return Warn, fmt.Sprintf("the key's permissions could not be read (GET /api-keys/current: HTTP %d); tether's deletes will tell", resp.StatusCode)
		}
		var k apiKeyJSON
		if err := json.Unmarshal(body, &k); err != nil {
			return Warn, "the key's permissions could not be read: " + err.Error()
		}
		perms := append([]string{}, k.Permissions...)
		sort.Strings(perms)
		detail := fmt.Sprintf("key %q (%s): %s", k.Name, k.Value, strings.Join(perms, ", "))
		has := func(p string) bool {
			for _, q := range k.Permissions {
				if q == p {
					return true
				}
			}
			return false
		}
		if k.ExpiresAt != nil {
			if t, err := time.Parse(time.RFC3339Nano, *k.ExpiresAt); err == nil {
				switch left := t.Sub(r.now()); {
				case left <= 0:
					return Fail, detail + "; the key expired at " + t.UTC().Format(time.DateTime)
				case left < ExpiresSoon:
					if has(permDelete) && has(permWrite) {
						return Warn, detail + "; the key expires at " + t.UTC().Format(time.DateTime) + ": a tether running then cannot delete its sandboxes"
					}
				}
			}
		}
		switch {
		case !has(permDelete):
			return Fail, detail + "; lacks " + permDelete + ": tether cannot delete any sandbox with this key (give the key that permission, or create one with it)"
		case !has(permWrite):
			return Warn, detail + "; lacks " + permWrite + ": deletes work, but not the auto-stop backstop, --on-drain stop, or lease mode"
		}
		return Pass, detail
	})
}

func redact(s, secret string) string {
	if len(secret) < 8 {
		return s
	}
	return strings.ReplaceAll(s, secret, "[REDACTED]")
}

// limit is one throttler's window as the last answer reported it.
type limit struct {
	limit, remaining int
	reset            time.Duration
	known            bool
}

// recorder is the checks' transport: it remembers the X-RateLimit-*
// headers Daytona sends with allowed answers, per throttler
// (common/utils/rate-limit-headers.util.ts:24-33 at v0.190.0).
type recorder struct {
	base   http.RoundTripper
	mu     sync.Mutex
	limits map[string]*limit
}

func (rec *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := rec.base.RoundTrip(req)
	if resp == nil {
		return resp, err
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for k, v := range resp.Header {
		k = strings.ToLower(k)
		if len(v) == 0 || !strings.HasPrefix(k, "x-ratelimit-") {
			continue
		}
		rest := strings.TrimPrefix(k, "x-ratelimit-")
		field, name, ok := strings.Cut(rest, "-")
		if !ok {
			continue
		}
		n, perr := strconv.Atoi(strings.TrimSpace(v[0]))
		if perr != nil {
			continue
		}
		l := rec.limits[name]
		if l == nil {
			l = &limit{}
			rec.limits[name] = l
		}
		switch field {
		case "limit":
			l.limit, l.known = n, true
		case "remaining":
			l.remaining = n
		case "reset":
			l.reset = time.Duration(n) * time.Second
		}
	}
	return resp, err
}

// rateLimits says, per throttler the answers reported, how much is left.
// when prefixes the detail; after the round trip a step is reported only
// when the answers carried the headers.
func (r *run) rateLimits(when string) {
	if r.rec == nil {
		return
	}
	r.rec.mu.Lock()
	names := make([]string, 0, len(r.rec.limits))
	for n, l := range r.rec.limits {
		if l.known {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	v := Pass
	var parts []string
	for _, n := range names {
		l := r.rec.limits[n]
		parts = append(parts, fmt.Sprintf("%s %d of %d left (window resets in %s)", n, l.remaining, l.limit, l.reset))
		if float64(l.remaining) < LowHeadroom*float64(l.limit) {
			v = Warn
		}
	}
	r.rec.mu.Unlock()
	if len(parts) == 0 {
		if when == "" {
			r.report(Step{Name: "rate limits", Verdict: Skip, Detail: "the answers carried no X-RateLimit headers"})
		}
		return
	}
	detail := strings.Join(parts, "; ")
	if v == Warn {
		detail += fmt.Sprintf(": under %d%% left; a drain of many sandboxes will wait for the window", int(LowHeadroom*100))
	}
	r.report(Step{Name: "rate limits", Verdict: v, Detail: when + detail})
}

// journalCheck looks at the journal path without changing anything but a
// probe file in its directory, removed at once.
func journalCheck(path string) (Verdict, string) {
	fi, err := os.Stat(path)
	switch {
	case err == nil && !fi.Mode().IsRegular():
		return Fail, "not a regular file: the journal must be a file of its own"
	case err == nil:
		j, err := journal.OpenReadOnly(path, 0)
		if errors.Is(err, journal.ErrLocked) {
			return Pass, "held by a running tether"
		}
		if err != nil {
			return Fail, err.Error()
		}
		defer j.Close()
		n, err := j.LiveCount()
		if err != nil {
			return Fail, err.Error()
		}
		if err := probe(filepath.Dir(path)); err != nil {
			return Fail, err.Error()
		}
		if n > 0 {
			return Warn, fmt.Sprintf("a journal of owner %s with %d live intents left by an earlier run: the next tether run replays them, or `tether drain --journal %s`", j.Owner(), n, path)
		}
		return Pass, fmt.Sprintf("a journal of owner %s, nothing live", j.Owner())
	case !errors.Is(err, os.ErrNotExist):
		return Fail, err.Error()
	}
	// No journal yet: the nearest directory that exists must let tether
	// make the rest and the file.
	dir := filepath.Dir(path)
	for {
		if _, err := os.Stat(dir); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	if err := probe(dir); err != nil {
		return Fail, err.Error()
	}
	return Pass, "no journal yet; tether run creates it (" + dir + " is writable)"
}

// probe checks that dir takes a new file.
func probe(dir string) error {
	f, err := os.CreateTemp(dir, ".tether-doctor-*")
	if err != nil {
		return fmt.Errorf("directory %s: tether cannot write there: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}
