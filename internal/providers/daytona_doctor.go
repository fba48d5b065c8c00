package providers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tether-run/tether/internal/doctor/check"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/daytona"
)

// Daytona's checks for `tether doctor`: credentials and where they came
// from, the API URL, TLS, one authenticated call (the one tether run makes
// at start), the key's permissions, the rate-limit headroom the answers
// report; with --live, a round trip on a sandbox of Daytona's default
// size with a short auto-stop.

const (
	// DoctorAutoStopMinutes is the auto-stop of the round trip's sandbox:
	// if every cleanup failed, Daytona stops it itself after this idle time.
	DoctorAutoStopMinutes = 1
	// daytonaDoctorCallTimeout bounds one call of the round trip (its
	// create waits for the sandbox to start); the checks bound theirs with
	// their own contexts.
	daytonaDoctorCallTimeout = time.Minute
	// lowHeadroom: a rate limit with less than this share left is a warning.
	lowHeadroom = 0.1
	// expiresSoon: a key that expires within this is a warning.
	expiresSoon = 7 * 24 * time.Hour
)

// The permissions tether needs on an API key
// (provider/daytona classifies a 403 "Access denied" by them).
const (
	permDelete = "delete:sandboxes"
	permWrite  = "write:sandboxes"
)

// daytonaNamed are the settings whose presence names Daytona.
var daytonaNamed = []string{daytona.EnvAPIKey, daytona.EnvJWTToken, daytona.EnvOrganizationID, daytona.EnvAPIURL, daytona.EnvServerURL}

func daytonaDoctor(o DoctorOptions) Doctor {
	c := &daytonaCheckup{o: o, r: o.Reporter, getenv: o.Getenv, origin: o.Origin}
	if c.getenv == nil {
		// As tether run reads them (.env files included); a file it
		// ignores is a warning.
		env := DaytonaSettings(o.warnings(), slog.LevelDebug)
		c.getenv, c.origin = env.Get, env.Origin
	}
	d := Doctor{Check: c.check,
		Unchecked: check.Step{Name: "credentials", Verdict: check.Skip, Detail: "no Daytona settings (" + daytona.EnvAPIKey + ")"}}
	for _, v := range daytonaNamed {
		if c.getenv(v) != "" {
			d.Named = true
		}
	}
	return d
}

// daytonaCheckup is one run of Daytona's checks: what was learned so far.
type daytonaCheckup struct {
	o              DoctorOptions
	r              *check.Reporter
	getenv, origin func(string) string
	cfg            daytona.Config
	urlVar         string // the variable the API URL came from; "" for the default
	rec            *recorder
	prov           *daytona.Provider
	apiOK          bool
}

func (c *daytonaCheckup) check(ctx context.Context) Checkup {
	credsOK := c.credentials()
	urlOK := c.apiURL()
	if credsOK && urlOK {
		check.TLS(ctx, c.r, "tls", c.cfg.APIURL)
		c.api(ctx)
	} else {
		c.r.Step(check.Step{Name: "api", Verdict: check.Skip, Detail: "needs credentials and an API URL"})
	}
	if c.apiOK {
		c.permissions(ctx)
		c.rateLimits("")
	} else {
		c.r.Step(check.Step{Name: "permissions", Verdict: check.Skip, Detail: "needs the API"})
	}
	cu := Checkup{RoundTrip: c.roundTrip, After: func() { c.rateLimits("after the round trip: ") }}
	if c.apiOK {
		cu.Provider = c.prov
	}
	return cu
}

// from says where a setting that is set came from: "" for the
// environment, else " in <file>".
func (c *daytonaCheckup) from(name string) string {
	if c.origin == nil {
		return ""
	}
	if o := c.origin(name); o != "env" && o != "default" && o != "" {
		return " in " + o
	}
	return ""
}

// credentials says which credentials tether would use, from where.
func (c *daytonaCheckup) credentials() bool {
	cfg, err := daytona.ConfigFrom(c.getenv)
	if err != nil {
		c.r.Step(check.Step{Name: "credentials", Verdict: check.Fail, Detail: err.Error()})
		return false
	}
	c.cfg = cfg
	if cfg.APIKey != "" {
		detail := fmt.Sprintf("%s%s (%s)", daytona.EnvAPIKey, c.from(daytona.EnvAPIKey), check.MaskKey(cfg.APIKey))
		if cfg.JWTToken != "" {
			detail += "; " + daytona.EnvJWTToken + " is set too and not used (the key wins, as in Daytona's SDKs)"
		}
		c.r.Step(check.Step{Name: "credentials", Verdict: check.Pass, Detail: detail})
		return true
	}
	c.r.Step(check.Step{Name: "credentials", Verdict: check.Pass, Detail: fmt.Sprintf("%s%s (%s) in organization %s (%s%s); a JWT expires: a long-running tether needs an API key",
		daytona.EnvJWTToken, c.from(daytona.EnvJWTToken), check.MaskKey(cfg.JWTToken), cfg.OrganizationID, daytona.EnvOrganizationID, c.from(daytona.EnvOrganizationID))})
	return true
}

// apiURL says which API URL tether would call, from where.
func (c *daytonaCheckup) apiURL() bool {
	raw := daytona.DefaultAPIURL
	for _, v := range []string{daytona.EnvAPIURL, daytona.EnvServerURL} {
		if s := c.getenv(v); s != "" {
			c.urlVar, raw = v, s
			break
		}
	}
	s := daytona.SetupFrom(c.getenv, c.o.logger())
	for _, p := range s.Problems {
		if errors.Is(p, daytona.ErrBadAPIURL) {
			c.r.Step(check.Step{Name: "api url", Verdict: check.Fail, Detail: p.Error()})
			return false
		}
	}
	from := "the default"
	if c.urlVar != "" {
		from = c.urlVar + c.from(c.urlVar)
	}
	v, detail := check.Pass, fmt.Sprintf("%s (%s)", c.cfg.APIURL, from)
	if c.cfg.APIURL == "" {
		// No credentials: ConfigFrom said why; the URL still counts.
		detail = fmt.Sprintf("%s (%s)", raw, from)
	}
	if c.urlVar == daytona.EnvServerURL {
		v, detail = check.Warn, detail+": deprecated by Daytona, set "+daytona.EnvAPIURL+" instead"
	}
	if check.PlainHTTPAway(c.cfg.APIURL) {
		v, detail = check.Warn, detail+": plain http, the key crosses the network unencrypted"
	}
	c.r.Step(check.Step{Name: "api url", Verdict: v, Detail: detail})
	return true
}

// api makes the one authenticated call tether makes at start (a list of
// at most one sandbox), through a transport that records the rate-limit
// headers of every answer.
func (c *daytonaCheckup) api(ctx context.Context) {
	c.rec = &recorder{base: http.DefaultTransport, limits: map[string]*limit{}}
	cfg := c.cfg
	cfg.HTTPClient = &http.Client{Transport: c.rec}
	cfg.Logger = c.o.logger().With("component", "daytona")
	// The checks bound their calls with their own contexts; the longer
	// bound is for the round trip's create, which Daytona answers once the
	// sandbox has started.
	cfg.CallTimeout = daytonaDoctorCallTimeout
	p, err := daytona.New(cfg)
	if err != nil {
		c.r.Step(check.Step{Name: "api", Verdict: check.Fail, Detail: err.Error()})
		return
	}
	c.prov = p
	c.r.Timed("api", func() (check.Verdict, string) {
		cctx, cancel := c.r.Call(ctx)
		defer cancel()
		if err := p.Check(cctx); err != nil {
			return check.Fail, check.Why(err)
		}
		c.apiOK = true
		return check.Pass, "an authenticated list of sandboxes answered"
	})
}

// roundTrip creates the round trip's sandbox: Daytona's default size, a
// short auto-stop as its backstop.
func (c *daytonaCheckup) roundTrip(ctx context.Context, name string, labels map[string]string) (provider.Sandbox, string, error) {
	stop := DoctorAutoStopMinutes
	sb, err := c.prov.Create(ctx, name, labels, &stop)
	if err != nil {
		return provider.Sandbox{}, "", err
	}
	return sb, fmt.Sprintf("sandbox %s (%s), Daytona's default size, auto-stop %d minute as a backstop", sb.ID, sb.State, stop), nil
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
func (c *daytonaCheckup) permissions(ctx context.Context) {
	if c.cfg.APIKey == "" {
		c.r.Step(check.Step{Name: "permissions", Verdict: check.Skip, Detail: "a JWT acts with its user's role in the organization, which Daytona does not show to it"})
		return
	}
	c.r.Timed("permissions", func() (check.Verdict, string) {
		cctx, cancel := c.r.Call(ctx)
		defer cancel()
		req, err := http.NewRequestWithContext(cctx, http.MethodGet, strings.TrimRight(c.cfg.APIURL, "/")+"/api-keys/current", nil)
		if err != nil {
			return check.Fail, err.Error()
		}
		req.Header.Set("Authorization", "Bearer "+c.cfg.APIKey)
		req.Header.Set("User-Agent", "tether")
		resp, err := (&http.Client{Transport: c.rec}).Do(req)
		if err != nil {
			return check.Warn, "the key's permissions could not be read: " + check.Redact(err.Error(), c.cfg.APIKey)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if resp.StatusCode != http.StatusOK {
			return check.Warn, fmt.Sprintf("the key's permissions could not be read (GET /api-keys/current: HTTP %d); tether's deletes will tell", resp.StatusCode)
		}
		var k apiKeyJSON
		if err := json.Unmarshal(body, &k); err != nil {
			return check.Warn, "the key's permissions could not be read: " + err.Error()
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
				switch left := t.Sub(c.r.Clock()); {
				case left <= 0:
					return check.Fail, detail + "; the key expired at " + t.UTC().Format(time.DateTime)
				case left < expiresSoon:
					if has(permDelete) && has(permWrite) {
						return check.Warn, detail + "; the key expires at " + t.UTC().Format(time.DateTime) + ": a tether running then cannot delete its sandboxes"
					}
				}
			}
		}
		switch {
		case !has(permDelete):
			return check.Fail, detail + "; lacks " + permDelete + ": tether cannot delete any sandbox with this key (give the key that permission, or create one with it)"
		case !has(permWrite):
			return check.Warn, detail + "; lacks " + permWrite + ": deletes work, but not the auto-stop backstop, --on-drain stop, or lease mode"
		}
		return check.Pass, detail
	})
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
func (c *daytonaCheckup) rateLimits(when string) {
	if c.rec == nil {
		return
	}
	c.rec.mu.Lock()
	names := make([]string, 0, len(c.rec.limits))
	for n, l := range c.rec.limits {
		if l.known {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	v := check.Pass
	var parts []string
	for _, n := range names {
		l := c.rec.limits[n]
		parts = append(parts, fmt.Sprintf("%s %d of %d left (window resets in %s)", n, l.remaining, l.limit, l.reset))
		if float64(l.remaining) < lowHeadroom*float64(l.limit) {
			v = check.Warn
		}
	}
	c.rec.mu.Unlock()
	if len(parts) == 0 {
		if when == "" {
			c.r.Step(check.Step{Name: "rate limits", Verdict: check.Skip, Detail: "the answers carried no X-RateLimit headers"})
		}
		return
	}
	detail := strings.Join(parts, "; ")
	if v == check.Warn {
		detail += fmt.Sprintf(": under %d%% left; a drain of many sandboxes will wait for the window", int(lowHeadroom*100))
	}
	c.r.Step(check.Step{Name: "rate limits", Verdict: v, Detail: when + detail})
}
