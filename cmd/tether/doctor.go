package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/tether-run/tether/internal/config"
	"github.com/tether-run/tether/internal/doctor"
)

// Exit codes of `tether doctor`, for a CI job.
const (
	// exitCodeDoctorFailed: a check (or a step of the round trip) failed:
	// tether would not work as configured here.
	exitCodeDoctorFailed = 1
	// exitCodeDoctorLeftBehind: the round trip could not confirm its
	// sandbox gone, even after its cleanup: it may still run on the
	// account (its id is printed). The same code as a drain that leaves
	// sandboxes live.
	exitCodeDoctorLeftBehind = exitCodeUnresolved
)

// doctorCommand is `tether doctor`: whether tether will work with this
// account and this machine, checked before it is trusted with sandboxes.
type doctorCommand struct{}

func (*doctorCommand) Synopsis() string {
	return "check the Daytona account, the E2B team, the Docker engine and the journal tether would use (--live: one real round trip)"
}

var doctorUsage = `Usage: tether doctor [--live] [--journal PATH] [--json] [--verbose]

Checks what tether will need, with the same environment tether run reads:
  credentials   which Daytona credentials are found, and in which variable
  api url       the API URL and where it comes from
  tls           the API reached over TLS with the CA bundle in use
  api           one authenticated call (what tether run makes at start)
  permissions   the API key's own record: delete:sandboxes (every delete)
                and write:sandboxes (auto-stop backstop, --on-drain stop,
                lease mode); its expiry
  rate limits   the headroom the answers report, per throttler
  journal       the journal's directory: writable, not lost with the
                container; a journal already there and what it holds
When E2B_API_KEY, E2B_API_URL or E2B_DOMAIN is set, E2B's too (with E2B
alone, Daytona is not checked):
  e2b key       the E2B API key
  e2b api url   the API URL and where it comes from
  e2b api       one authenticated call (what tether run makes at start)
  e2b settings  --e2b-max-timeout and --e2b-proxy as tether run reads
                them from TETHER_E2B_MAX_TIMEOUT and TETHER_E2B_PROXY
When tether run would use a Docker engine (DOCKER_HOST, the docker CLI's
context, /var/run/docker.sock; not with TETHER_DOCKER=false), its too:
  docker engine    its address, and where it came from
  docker socket    this user may open its socket (over tcp: TLS or not)
  docker api       GET /_ping and /version: the engine, its version and
                   API version (Docker before 20.10.27 is a warning: its
                   lock inversion, moby/moby#46661)
  docker settings  --docker-proxy as tether run reads TETHER_DOCKER_PROXY
With --live it then makes one full round trip on the account, as tether
run would: declare an intent (in a scratch journal), create a sandbox of
Daytona's default size with a 1-minute auto-stop, observe it, drain it,
and confirm it gone; whatever happens, it deletes that sandbox and waits
until it is gone before it exits; on Docker the same with one container
of an image it builds FROM scratch (removed after). (No E2B sandbox is
created: E2B's check is its authenticated read.) Each step is printed with its latency
and a verdict (ok, warn, FAIL, skip). Without --live nothing is changed
on the account.

Exit: 0 when no check failed (warnings allowed), ` + fmt.Sprint(exitCodeDoctorFailed) + ` when one failed,
` + fmt.Sprint(exitCodeDoctorLeftBehind) + ` when the --live round trip could not confirm its sandbox gone (its id is
printed: delete it by hand), ` + fmt.Sprint(exitCodeUsage) + ` for a usage error.
`

func (*doctorCommand) Run(ctx context.Context, args []string) error {
	cfg := config.Default()
	fs := newFlags("doctor", doctorUsage)
	envErr := cfg.Bind(fs, config.Journal)
	live := fs.Bool("live", false, "also make one round trip on the account: create the smallest sandbox, drain it, confirm it gone (cleaned up whatever happens)")
	asJSON := fs.Bool("json", false, "print one JSON object (the steps and any sandbox left behind) instead of the lines")
	verbose := fs.Bool("verbose", false, "also print the provider's and the reaper's log lines (stderr)")
	callTimeout := fs.Duration("timeout", doctor.DefaultCallTimeout, "bound of each check's call")
	if err := parseConfig(fs, args, 0, &cfg, envErr); err != nil {
		return helped(err)
	}
	if *callTimeout <= 0 {
		return usageError(fs, fmt.Errorf("--timeout %s: must be positive", *callTimeout))
	}
	from := "default"
	switch {
	case isSet(fs, "journal"):
		from = "--journal"
	case os.Getenv(config.EnvJournal) != "":
		from = config.EnvJournal
	}
	log := slog.New(slog.DiscardHandler)
	if *verbose {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	// Each provider reads its settings as tether run does; what is wrong
	// with where they come from (an .env file ignored) is said on stderr.
	warnings := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	o := doctor.Options{Journal: cfg.Journal, JournalFrom: from, Live: *live, CallTimeout: *callTimeout, Logger: log, Warnings: warnings}
	if !*asJSON {
		o.Report = func(s doctor.Step) { writeStep(stdout, s) }
	}
	res := doctor.Run(ctx, o)
	if *asJSON {
		b, _ := json.MarshalIndent(res, "", "  ")
		fmt.Fprintln(stdout, string(b))
	} else {
		writeVerdict(stdout, res, *live)
	}
	switch {
	case len(res.LeftBehind) > 0:
		return &exitError{Code: exitCodeDoctorLeftBehind}
	case res.Failed():
		return &exitError{Code: exitCodeDoctorFailed}
	}
	return nil
}

// writeStep is one line: verdict, name, latency, detail.
func writeStep(w io.Writer, s doctor.Step) {
	lat := ""
	switch d := s.Latency; {
	case d >= 10*time.Millisecond:
		lat = d.Round(time.Millisecond).String()
	case d > 0:
		lat = d.Round(10 * time.Microsecond).String()
	}
	fmt.Fprintf(w, "%-4s  %-14s %8s  %s\n", s.Verdict, s.Name, lat, s.Detail)
}

func writeVerdict(w io.Writer, res doctor.Result, live bool) {
	var failed, warned []string
	roundTrip := false
	for _, s := range res.Steps {
		// "live: ..." for the default provider, "<name> live: ..." for another.
		roundTrip = roundTrip || strings.HasPrefix(s.Name, "live:") || strings.Contains(s.Name, " live: ")
		switch s.Verdict {
		case doctor.Fail:
			failed = append(failed, s.Name)
		case doctor.Warn:
			warned = append(warned, s.Name)
		}
	}
	fmt.Fprintln(w)
	switch {
	case len(res.LeftBehind) > 0:
		fmt.Fprintf(w, "verdict: a sandbox of the round trip may still exist on the account: %s (label %s=%s); delete it by hand\n", strings.Join(res.LeftBehind, ", "), doctor.LabelDoctor, doctor.LabelDoctorValue)
	case len(failed) > 0:
		fmt.Fprintf(w, "verdict: tether would not work as configured here: fix %s\n", strings.Join(failed, ", "))
	case !live:
		fmt.Fprintf(w, "verdict: ready%s; `tether doctor --live` proves it with one sandbox on the account\n", warnings(warned))
	case !roundTrip:
		fmt.Fprintf(w, "verdict: ready%s; no sandbox was created: no provider checked here makes a round trip\n", warnings(warned))
	default:
		fmt.Fprintf(w, "verdict: ready%s: a sandbox was created, drained and confirmed gone on this account\n", warnings(warned))
	}
}

func warnings(w []string) string {
	if len(w) == 0 {
		return ""
	}
	return " (look at: " + strings.Join(w, ", ") + ")"
}
