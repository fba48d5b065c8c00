// Package doctor checks, before tether is trusted with sandboxes, what it
// will need on the user's own accounts and on this machine: each
// provider's checks the environment names (the registry's Kind.Doctor:
// credentials and where they come from, the API reached over TLS, what
// the credentials may do, the rate-limit headroom), then the journal's
// directory. With Live it also makes one full round trip on each checked
// provider that has one — declare an intent, create the smallest sandbox,
// observe it, drain it, confirm it gone — and cleans up whatever happens.
//
// Every step is reported as it ends, with its latency and a verdict, so a
// command can print them as they come; Run never stops at the first
// failure of a check that later ones do not depend on. This package names
// no provider: it holds them by name through internal/providers.
package doctor

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/doctor/check"
	"github.com/tether-run/tether/internal/providers"
)

// Verdict is how one step went (package check).
type Verdict = check.Verdict

// Verdicts. Only Fail makes the whole check fail; Warn is something to
// look at that does not stop tether from working.
const (
	Pass = check.Pass
	Warn = check.Warn
	Fail = check.Fail
	Skip = check.Skip
)

// Step is one check, or one step of the live round trip.
type Step = check.Step

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
	DefaultCallTimeout = check.DefaultCallTimeout
	// DefaultLiveTimeout bounds each live round trip; its cleanup has
	// DefaultCleanupTimeout more.
	DefaultLiveTimeout = 3 * time.Minute
	// DefaultCleanupTimeout bounds the cleanup after the round trip.
	DefaultCleanupTimeout = time.Minute
	// LabelDoctor=LabelDoctorValue marks the round trip's sandbox (and
	// intent); tether-* keys are reserved for ownership labels.
	LabelDoctor      = "purpose"
	LabelDoctorValue = "tether-doctor"
)

// Options say what to check.
type Options struct {
	// Getenv reads one provider setting and Origin says where it came
	// from ("env", ".env.local", ".env"); nil: each provider reads its
	// settings as tether run does (Daytona's .env files included), which
	// is what tether doctor wants. Tests set them.
	Getenv, Origin func(string) string
	// Journal is the journal path tether would use; JournalFrom says where
	// that came from ("--journal", "TETHER_JOURNAL", "default").
	Journal, JournalFrom string
	// Live makes the round trip on the account.
	Live bool
	// CallTimeout, LiveTimeout, CleanupTimeout: the Default* when zero.
	CallTimeout, LiveTimeout, CleanupTimeout time.Duration
	// Logger receives the reaper's and the providers' lines during the
	// checks and the round trip (discarded if nil); Warnings, what is
	// wrong with where a provider's settings come from, such as an .env
	// file it ignores (discarded if nil).
	Logger, Warnings *slog.Logger
	// Report, if set, is called with each step as it ends.
	Report func(Step)
	// Now is the clock (time.Now if nil).
	Now func() time.Time
}

func orDefault(v, def time.Duration) time.Duration {
	if v <= 0 {
		return def
	}
	return v
}

// run is one Run: the options, the steps so far.
type run struct {
	o   Options
	res Result
	rep *check.Reporter
}

func (r *run) report(s Step) {
	r.res.Steps = append(r.res.Steps, s)
	if r.o.Report != nil {
		r.o.Report(s)
	}
}

// checked is one provider the doctor checked, and what its checks left
// for the round trip.
type checked struct {
	kind providers.Kind
	providers.Checkup
}

// Run makes every check, then (with o.Live) the round trips. It checks
// every registered provider the environment names, in the registry's
// order, or the default provider alone when it names none (a bare
// environment is checked as the default's, so that its missing
// credentials are said).
func Run(ctx context.Context, o Options) Result {
	r := &run{o: o}
	if r.o.Logger == nil {
		r.o.Logger = slog.New(slog.DiscardHandler)
	}
	r.rep = &check.Reporter{Report: r.report, CallTimeout: o.CallTimeout, Now: o.Now}
	po := providers.DoctorOptions{Reporter: r.rep, Getenv: o.Getenv, Origin: o.Origin, Logger: r.o.Logger, Warnings: o.Warnings}
	var kinds []providers.Kind
	var doctors []providers.Doctor
	named := map[string]bool{}
	for _, k := range providers.Registered() {
		if k.Doctor == nil {
			continue
		}
		d := k.Doctor(po)
		kinds, doctors = append(kinds, k), append(doctors, d)
		if d.Named {
			named[k.Name] = true
		}
	}
	var names []string
	for _, k := range kinds {
		if named[k.Name] {
			names = append(names, k.Name)
		}
	}
	if len(names) == 0 {
		named[intent.DefaultProvider] = true
		names = []string{intent.DefaultProvider}
	}
	var all []checked
	for i, k := range kinds {
		if !named[k.Name] {
			if s := doctors[i].Unchecked; s.Name != "" {
				s.Detail += ": tether guards " + strings.Join(names, " and ") + " sandboxes alone here"
				r.report(s)
			}
			continue
		}
		all = append(all, checked{k, doctors[i].Check(ctx)})
	}
	r.journal()
	if o.Live {
		r.roundTrips(ctx, all)
	}
	return r.res
}

// roundTrips makes the round trip of every checked provider that has one,
// each after every check passed.
func (r *run) roundTrips(ctx context.Context, all []checked) {
	var none []string
	made := false
	for _, c := range all {
		if c.RoundTrip == nil {
			if c.NoRoundTrip != "" {
				none = append(none, c.NoRoundTrip)
			}
			continue
		}
		made = true
		step := "live"
		if c.kind.Name != intent.DefaultProvider {
			step = c.kind.Name + " live"
		}
		if c.Provider == nil || r.res.Failed() {
			r.report(Step{Name: step, Verdict: Skip, Detail: "not attempted: fix the failed checks first"})
			continue
		}
		r.live(ctx, step, c.Checkup)
		if c.After != nil {
			c.After()
		}
	}
	if !made {
		r.report(Step{Name: "live", Verdict: Skip, Detail: "no provider checked here makes a round trip: " + strings.Join(none, "; ")})
	}
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
