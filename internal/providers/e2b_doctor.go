package providers

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/tether-run/tether/internal/config"
	"github.com/tether-run/tether/internal/doctor/check"
	"github.com/tether-run/tether/provider/e2b"
)

// E2B's checks for `tether doctor`, when the environment names an E2B
// setup (E2B_API_KEY, E2B_API_URL or E2B_DOMAIN, e2b.Configured), read as
// tether run reads it (the environment alone): the key, the API URL, one
// authenticated read (the check tether run makes at start: a list of at
// most one sandbox), and tether's own E2B settings. Its steps are named
// "e2b ...". No round trip: the read is E2B's check.

func e2bDoctor(o DoctorOptions) Doctor {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	c := &e2bCheckup{o: o, r: o.Reporter, getenv: getenv}
	return Doctor{Named: e2b.Configured(getenv), Check: c.check}
}

type e2bCheckup struct {
	o      DoctorOptions
	r      *check.Reporter
	getenv func(string) string
}

func (c *e2bCheckup) check(ctx context.Context) Checkup {
	cu := Checkup{NoRoundTrip: "E2B's check is its authenticated read above"}
	if key := c.getenv(e2b.EnvAPIKey); key != "" {
		c.r.Step(check.Step{Name: "e2b key", Verdict: check.Pass, Detail: fmt.Sprintf("%s (%s)", e2b.EnvAPIKey, check.MaskKey(key))})
	} else {
		c.r.Step(check.Step{Name: "e2b key", Verdict: check.Fail, Detail: fmt.Sprintf("no E2B credentials: set %s (%s or %s names an E2B setup; without a key tether refuses E2B intents and serves no E2B proxy)", e2b.EnvAPIKey, e2b.EnvAPIURL, e2b.EnvDomain)})
	}
	s := e2b.SetupFrom(c.getenv, c.o.logger().With("component", "e2b"))
	urlOK := c.apiURL(s)
	switch {
	case s.Provider != nil:
		if c.r.Timed("e2b api", func() (check.Verdict, string) {
			cctx, cancel := c.r.Call(ctx)
			defer cancel()
			if err := s.Provider.Check(cctx); err != nil {
				return check.Fail, check.Why(err)
			}
			return check.Pass, "an authenticated list of sandboxes answered"
		}) == check.Pass {
			cu.Provider = s.Provider
		}
	case urlOK:
		c.r.Step(check.Step{Name: "e2b api", Verdict: check.Skip, Detail: "needs credentials"})
	default:
		c.r.Step(check.Step{Name: "e2b api", Verdict: check.Skip, Detail: "needs credentials and an API URL"})
	}
	c.settings()
	return cu
}

// apiURL says which E2B API URL tether would call, from where.
func (c *e2bCheckup) apiURL(s e2b.Setup) bool {
	variable := e2b.URLVariable(c.getenv)
	for _, p := range s.Problems {
		if strings.HasPrefix(p.Error(), variable+":") {
			c.r.Step(check.Step{Name: "e2b api url", Verdict: check.Fail, Detail: p.Error()})
			return false
		}
	}
	from := variable
	if variable == e2b.EnvDomain && c.getenv(e2b.EnvDomain) == "" {
		from = "the default"
	}
	v, detail := check.Pass, fmt.Sprintf("%s (%s)", s.APIURL, from)
	if check.PlainHTTPAway(s.APIURL) {
		v, detail = check.Warn, detail+": plain http, the key crosses the network unencrypted"
	}
	c.r.Step(check.Step{Name: "e2b api url", Verdict: v, Detail: detail})
	return true
}

// settings shows tether's own E2B settings as tether run would read them
// (TETHER_E2B_*), or why tether run would refuse them.
func (c *e2bCheckup) settings() {
	st, err := config.E2BFromEnv()
	if err != nil {
		c.r.Step(check.Step{Name: "e2b settings", Verdict: check.Fail, Detail: err.Error()})
		return
	}
	proxy := "on: the child's E2B_API_URL is tether's proxy"
	if !st.E2BProxy {
		proxy = "off: only intents declared over the socket or the spool are journaled"
	}
	c.r.Step(check.Step{Name: "e2b settings", Verdict: check.Pass, Detail: fmt.Sprintf("--e2b-max-timeout %s (a longer sandbox timeout is cut to it, renewed while the runner lives); --e2b-proxy %s", st.E2BMaxTimeout, proxy)})
}
