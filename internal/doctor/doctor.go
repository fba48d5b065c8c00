// Package doctor checks, against the user's own Daytona account (and E2B
// team, when E2B is configured: e2b.go), what tether will need there:
// credentials and where they come from, the API reachable (over TLS, with
// the CA bundle in use), the key's permissions, the rate-limit headroom the
// answers report, and the journal's directory.
// With Live it also makes one full round trip on the account — declare an
// intent, create the smallest sandbox, observe it, drain it, confirm it
// gone — and cleans up whatever happens.
//
// Every step is reported as it ends, with its latency and a verdict, so a
// command can print them as they come; Run never stops at the first
// failure of a check that later ones do not depend on.
package doctor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/daytona"
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

// Result is every step, and the sandboxes the live round trip could not
// confirm gone even after its cleanup (their ids): the one outcome that
// leaves something on the account.
type Result struct {
	Steps      []Step   `json:"steps"`
	LeftBehind []string `json:"left_behind,omitempty"`
}

// Failed reports whether any step failed.
func (r Result) Failed() bool {
	for _, s := range r.Steps {
		if s.Verdict == Fail {
			return true
		}
	}
	return false
}

// Defaults of Options.
const (
	// DefaultCallTimeout bounds each call of the checks.
	DefaultCallTimeout = 10 * time.Second
	// DefaultLiveTimeout bounds the whole live round trip; its cleanup has
	// DefaultCleanupTimeout more.
	DefaultLiveTimeout = 3 * time.Minute
	// DefaultCleanupTimeout bounds the cleanup after the round trip.
	DefaultCleanupTimeout = time.Minute
	// LowHeadroom: a rate limit with less than this share left is a warning.
	LowHeadroom = 0.1
	// ExpiresSoon: a key that expires within this is a warning.
	ExpiresSoon = 7 * 24 * time.Hour
	// LiveAutoStopMinutes is the auto-stop of the round trip's sandbox: if
	// every cleanup failed, Daytona stops it itself after this idle time.
	LiveAutoStopMinutes = 1
	// liveCallTimeout bounds one call of the round trip (its create waits
	// for the sandbox to start).
	liveCallTimeout = time.Minute
	// LabelDoctor=LabelDoctorValue marks the round trip's sandbox (and
	// intent); tether-* keys are reserved for ownership labels.
	LabelDoctor      = "purpose"
	LabelDoctorValue = "tether-doctor"
)

// Options say what to check. The Daytona settings are read as every
// tether command reads them (Getenv).
type Options struct {
	// Getenv reads one Daytona setting (os.Getenv if nil; tether doctor
	// passes the reading of the environment and the .env files that tether
	// run uses), and Origin says where it came from ("env", ".env.local",
	// ".env"; nil: the environment).
	Getenv, Origin func(string) string
	// Journal is the journal path tether would use; JournalFrom says where
	// that came from ("--journal", "TETHER_JOURNAL", "default").
	Journal, JournalFrom string
	// Live makes the round trip on the account.
	Live bool
	// CallTimeout, LiveTimeout, CleanupTimeout: the Default* when zero.
	CallTimeout, LiveTimeout, CleanupTimeout time.Duration
	// Logger receives the reaper's and the provider's lines during the
	// round trip (discarded if nil).
	Logger *slog.Logger
	// Report, if set, is called with each step as it ends.
	Report func(Step)
	// Now is the clock (time.Now if nil).
	Now func() time.Time
	// E2BGetenv reads one E2B variable (os.Getenv if nil: tether run reads
	// E2B's from its environment alone). When they name an E2B setup, E2B
	// is checked too.
	E2BGetenv func(string) string
	// E2B is tether's own E2B settings, shown beside E2B's checks.
	E2B E2BSettings
}

func orDefault(v, def time.Duration) time.Duration {
	if v <= 0 {
		return def
	}
	return v
}

// run is one Run: the options, what was learned so far, the steps.
type run struct {
	o      Options
	res    Result
	cfg    daytona.Config
	urlVar string // the variable the API URL came from; "" for the default
	rec    *recorder
	prov   *daytona.Provider
	apiOK  bool
}

func (r *run) getenv(name string) string {
	if r.o.Getenv == nil {
		return os.Getenv(name)
	}
	return r.o.Getenv(name)
}

// from says where a setting that is set came from: "" for the
// environment, else " in <file>".
func (r *run) from(name string) string {
	if r.o.Origin == nil {
		return ""
	}
	if o := r.o.Origin(name); o != "env" && o != "default" && o != "" {
		return " in " + o
	}
	return ""
}

func (r *run) report(s Step) {
	r.res.Steps = append(r.res.Steps, s)
	if r.o.Report != nil {
		r.o.Report(s)
	}
}

func (r *run) now() time.Time {
	if r.o.Now != nil {
		return r.o.Now()
	}
	return time.Now()
}

// timed runs f and reports its step with the time it took.
func (r *run) timed(name string, f func() (Verdict, string)) Verdict {
	start := time.Now()
	v, detail := f()
	r.report(Step{Name: name, Verdict: v, Detail: detail, Latency: time.Since(start)})
	return v
}

// Run makes every check, then (with o.Live) the round trip. E2B's
// checks follow Daytona's when the environment names an E2B setup; with
// E2B alone configured, Daytona is not checked.
func Run(ctx context.Context, o Options) Result {
	r := &run{o: o}
	if r.o.Logger == nil {
		r.o.Logger = slog.New(slog.DiscardHandler)
	}
	withE2B := r.e2bConfigured()
	withDaytona := !withE2B || r.daytonaNamed()
	if withDaytona {
		r.daytona(ctx)
	} else {
		r.report(Step{Name: "credentials", Verdict: Skip, Detail: noDaytona})
	}
	if withE2B {
		r.e2b(ctx)
	}
	r.journal()
	if !o.Live {
		return r.res
	}
	switch {
	case !withDaytona:
		r.report(Step{Name: "live", Verdict: Skip, Detail: "the round trip is Daytona's; E2B's is the authenticated read above"})
		return r.res
	case !r.apiOK || r.res.Failed():
		r.report(Step{Name: "live", Verdict: Skip, Detail: "not attempted: fix the failed checks first"})
		return r.res
	}
	r.live(ctx)
	r.rateLimits("after the round trip: ")
	return r.res
}

// daytona makes Daytona's checks.
func (r *run) daytona(ctx context.Context) {
	credsOK := r.credentials()
	urlOK := r.apiURL()
	if credsOK && urlOK {
		r.tls(ctx)
		r.api(ctx)
	} else {
		r.report(Step{Name: "api", Verdict: Skip, Detail: "needs credentials and an API URL"})
	}
	if r.apiOK {
		r.permissions(ctx)
		r.rateLimits("")
	} else {
		r.report(Step{Name: "permissions", Verdict: Skip, Detail: "needs the API"})
	}
}

// credentials says which credentials tether would use, from where.
func (r *run) credentials() bool {
	cfg, err := daytona.ConfigFrom(r.getenv)
	if err != nil {
		r.report(Step{Name: "credentials", Verdict: Fail, Detail: err.Error()})
		return false
	}
	r.cfg = cfg
	if cfg.APIKey != "" {
		detail := fmt.Sprintf("%s%s (%s)", daytona.EnvAPIKey, r.from(daytona.EnvAPIKey), maskKey(cfg.APIKey))
		if cfg.JWTToken != "" {
			detail += "; " + daytona.EnvJWTToken + " is set too and not used (the key wins, as in Daytona's SDKs)"
		}
		r.report(Step{Name: "credentials", Verdict: Pass, Detail: detail})
		return true
	}
	r.report(Step{Name: "credentials", Verdict: Pass, Detail: fmt.Sprintf("%s%s (%s) in organization %s (%s%s); a JWT expires: a long-running tether needs an API key",
		daytona.EnvJWTToken, r.from(daytona.EnvJWTToken), maskKey(cfg.JWTToken), cfg.OrganizationID, daytona.EnvOrganizationID, r.from(daytona.EnvOrganizationID))})
	return true
}

// maskKey shows enough of a credential to tell which one it is: its first
// four and last three characters when it is long enough to be a key.
func maskKey(k string) string {
	if len(k) < 16 {
		return fmt.Sprintf("%d characters", len(k))
	}
	return fmt.Sprintf("%s…%s, %d characters", k[:4], k[len(k)-3:], len(k))
}

// apiURL says which API URL tether would call, from where.
func (r *run) apiURL() bool {
	for _, v := range []string{daytona.EnvAPIURL, daytona.EnvServerURL} {
		if r.getenv(v) != "" {
			r.urlVar = v
			break
		}
	}
	s := daytona.SetupFrom(r.getenv, r.o.Logger)
	for _, p := range s.Problems {
		if errors.Is(p, daytona.ErrBadAPIURL) {
			r.report(Step{Name: "api url", Verdict: Fail, Detail: p.Error()})
			return false
		}
	}
	from := "the default"
	if r.urlVar != "" {
		from = r.urlVar + r.from(r.urlVar)
	}
	v, detail := Pass, fmt.Sprintf("%s (%s)", r.cfg.APIURL, from)
	if r.cfg.APIURL == "" {
		// No credentials: ConfigFromEnv said why; the URL still counts.
		_, raw := r.urlFromEnv()
		detail = fmt.Sprintf("%s (%s)", raw, from)
	}
	if r.urlVar == daytona.EnvServerURL {
		v, detail = Warn, detail+": deprecated by Daytona, set "+daytona.EnvAPIURL+" instead"
	}
	if u := r.cfg.APIURL; strings.HasPrefix(strings.ToLower(u), "http://") && !loopback(u) {
		v, detail = Warn, detail+": plain http, the key crosses the network unencrypted"
	}
	r.report(Step{Name: "api url", Verdict: v, Detail: detail})
	return true
}

func (r *run) urlFromEnv() (string, string) {
	for _, v := range []string{daytona.EnvAPIURL, daytona.EnvServerURL} {
		if s := r.getenv(v); s != "" {
			return v, s
		}
	}
	return "", daytona.DefaultAPIURL
}

// api makes the one authenticated call tether makes at start (a list of
// at most one sandbox), through a transport that records the rate-limit
// headers of every answer.
func (r *run) api(ctx context.Context) {
	r.rec = &recorder{base: http.DefaultTransport, limits: map[string]*limit{}}
	cfg := r.cfg
	cfg.HTTPClient = &http.Client{Transport: r.rec}
	cfg.Logger = r.o.Logger.With("component", "daytona")
	// The checks bound their calls with their own contexts; the longer
	// bound is for the round trip's create, which Daytona answers once the
	// sandbox has started.
	cfg.CallTimeout = liveCallTimeout
	p, err := daytona.New(cfg)
	if err != nil {
		r.report(Step{Name: "api", Verdict: Fail, Detail: err.Error()})
		return
	}
	r.prov = p
	r.timed("api", func() (Verdict, string) {
		cctx, cancel := context.WithTimeout(ctx, orDefault(r.o.CallTimeout, DefaultCallTimeout))
		defer cancel()
		if err := p.Check(cctx); err != nil {
			return Fail, why(err)
		}
		r.apiOK = true
		return Pass, "an authenticated list of sandboxes answered"
	})
}

// why is err with what kind of failure it is, for a reader deciding what
// to change.
func why(err error) string {
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

// journal checks the directory of the journal tether would use: there or
// creatable, writable, not somewhere that is gone with the container; and
// the journal itself, if there is one.
func (r *run) journal() {
	path := r.o.Journal
	if path == "" {
		r.report(Step{Name: "journal", Verdict: Skip, Detail: "no journal path"})
		return
	}
	from := r.o.JournalFrom
	if from == "" {
		from = "default"
	}
	v, detail := journalCheck(path)
	detail = fmt.Sprintf("%s (%s): %s", path, from, detail)
	if v != Fail {
		if tmp := os.TempDir(); within(path, tmp) || within(path, "/tmp") {
			v, detail = Warn, detail+"; it is under "+tmp+", which a new container (or a reboot) starts without: put it on a volume"
		}
	}
	r.report(Step{Name: "journal", Verdict: v, Detail: detail})
}

func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
