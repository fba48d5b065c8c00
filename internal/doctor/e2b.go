package doctor

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/tether-run/tether/provider/daytona"
	"github.com/tether-run/tether/provider/e2b"
)

// E2B is checked when the environment names an E2B setup (E2B_API_KEY,
// E2B_API_URL or E2B_DOMAIN, e2b.Configured), read as tether run reads
// it: the key, the API URL, one authenticated read (the check tether run
// makes at start: a list of at most one sandbox), and tether's own E2B
// settings. Its steps are named "e2b ..."; without an E2B setup there
// are none.

// E2BSettings are tether's own E2B settings as tether run would read them
// (config.E2BFromEnv), shown beside E2B's checks.
type E2BSettings struct {
	MaxTimeout time.Duration // --e2b-max-timeout
	Proxy      bool          // --e2b-proxy
	// Err says why they are not settings tether run would start with.
	Err error
}

func (r *run) e2bGetenv(name string) string {
	if r.o.E2BGetenv == nil {
		return os.Getenv(name)
	}
	return r.o.E2BGetenv(name)
}

// e2bConfigured reports whether the environment names an E2B setup.
func (r *run) e2bConfigured() bool { return e2b.Configured(r.e2bGetenv) }

// daytonaNamed reports whether any Daytona setting is set: without one,
// and with E2B configured, tether guards E2B alone and Daytona is not
// checked.
func (r *run) daytonaNamed() bool {
	for _, v := range []string{daytona.EnvAPIKey, daytona.EnvJWTToken, daytona.EnvOrganizationID, daytona.EnvAPIURL, daytona.EnvServerURL} {
		if r.getenv(v) != "" {
			return true
		}
	}
	return false
}

// e2b makes E2B's checks.
func (r *run) e2b(ctx context.Context) {
	get := r.e2bGetenv
	if key := get(e2b.EnvAPIKey); key != "" {
		r.report(Step{Name: "e2b key", Verdict: Pass, Detail: fmt.Sprintf("%s (%s)", e2b.EnvAPIKey, maskKey(key))})
	} else {
		r.report(Step{Name: "e2b key", Verdict: Fail, Detail: fmt.Sprintf("no E2B credentials: set %s (%s or %s names an E2B setup; without a key tether refuses E2B intents and serves no E2B proxy)", e2b.EnvAPIKey, e2b.EnvAPIURL, e2b.EnvDomain)})
	}
	s := e2b.SetupFrom(get, r.o.Logger.With("component", "e2b"))
	urlOK := r.e2bURL(s)
	switch {
	case s.Provider != nil:
		r.timed("e2b api", func() (Verdict, string) {
			cctx, cancel := context.WithTimeout(ctx, orDefault(r.o.CallTimeout, DefaultCallTimeout))
			defer cancel()
			if err := s.Provider.Check(cctx); err != nil {
				return Fail, why(err)
			}
			return Pass, "an authenticated list of sandboxes answered"
		})
	case urlOK:
		r.report(Step{Name: "e2b api", Verdict: Skip, Detail: "needs credentials"})
	default:
		r.report(Step{Name: "e2b api", Verdict: Skip, Detail: "needs credentials and an API URL"})
	}
	r.e2bSettings()
}

// e2bURL says which E2B API URL tether would call, from where.
func (r *run) e2bURL(s e2b.Setup) bool {
	variable := e2b.URLVariable(r.e2bGetenv)
	for _, p := range s.Problems {
		if strings.HasPrefix(p.Error(), variable+":") {
			r.report(Step{Name: "e2b api url", Verdict: Fail, Detail: p.Error()})
			return false
		}
	}
	from := variable
	if variable == e2b.EnvDomain && r.e2bGetenv(e2b.EnvDomain) == "" {
		from = "the default"
	}
	v, detail := Pass, fmt.Sprintf("%s (%s)", s.APIURL, from)
	if strings.HasPrefix(strings.ToLower(s.APIURL), "http://") && !loopback(s.APIURL) {
		v, detail = Warn, detail+": plain http, the key crosses the network unencrypted"
	}
	r.report(Step{Name: "e2b api url", Verdict: v, Detail: detail})
	return true
}

// e2bSettings shows tether's own E2B settings, or why tether run would
// refuse them.
func (r *run) e2bSettings() {
	st := r.o.E2B
	if st.Err != nil {
		r.report(Step{Name: "e2b settings", Verdict: Fail, Detail: st.Err.Error()})
		return
	}
	if st.MaxTimeout <= 0 {
		r.report(Step{Name: "e2b settings", Verdict: Skip, Detail: "not given"})
		return
	}
	proxy := "on: the child's E2B_API_URL is tether's proxy"
	if !st.Proxy {
		proxy = "off: only intents declared over the socket or the spool are journaled"
	}
	r.report(Step{Name: "e2b settings", Verdict: Pass, Detail: fmt.Sprintf("--e2b-max-timeout %s (a longer sandbox timeout is cut to it, renewed while the runner lives); --e2b-proxy %s", st.MaxTimeout, proxy)})
}

// noDaytona is why Daytona is not checked when E2B alone is configured.
const noDaytona = "no Daytona settings (" + daytona.EnvAPIKey + "): tether guards E2B sandboxes alone here"
