package main

import (
	"context"
	"fmt"

	"github.com/tether-run/tether/provider/e2b/e2btest"
)

// `tether demo e2b` serves the simulated E2B API of tether's tests on its
// own, until SIGINT or SIGTERM, so that tether run, an E2B runner and curl
// can be tried against E2B without an account. GET /_sim/sandboxes is the
// simulator's record of every sandbox's fate.

// localE2BAddr: loopback only, beside tether demo daytona's port.
const localE2BAddr = "127.0.0.1:3987"

const demoE2BUsage = `Usage: tether demo e2b [flags]

Serves a simulated E2B API (the one tether's tests use) on --addr until
SIGINT or SIGTERM, and prints the two variables to export so that tether
run and an E2B runner use it. Sandboxes end by their timeout (killed, or
paused with autoPause; one ever paused, forked from or snapshotted reads
paused after its timeout) as on the real server; a kill answers 204, then 404.
Every sandbox and its fate, killed ones included: GET /_sim/sandboxes.

--faults takes comma-separated key=value pairs:
  seed=1              generator seed, so that a run can be repeated
  latency=50ms        added to every call
  5xx=0.05            share of calls answered 500
  429=0.1             share of calls answered 429 (with Retry-After)
  create-lost=0.1     share of creates whose answer is lost
  fork-lost=0.1       share of forks whose answer is lost (the forks run)
  kill-fail=0.1       share of kills that fail on the node (500, then 404)
  resume-race=0.5     share of restores (resume, connect) that take restore-time: a kill
                      meanwhile answers 204, and the restore then lands (infra#3636)
  restore-time=2s     how long those restores take
  routes=get+kill     limit the faults to these routes

Example:
  tether demo e2b &
  export E2B_API_URL=http://127.0.0.1:3987 E2B_API_KEY=` + e2btest.DefaultKey + `
  tether run -- node my-e2b-runner.js
  tether run -- tether demo runner --provider e2b --sandboxes 3 --exit 0
  curl -s http://127.0.0.1:3987/_sim/sandboxes
`

// demoE2B runs `tether demo e2b ARGS`.
func demoE2B(ctx context.Context, args []string) error {
	fs := newFlags("demo e2b", demoE2BUsage)
	addr := fs.String("addr", localE2BAddr, "address to listen on (port 0: any free port, printed)")
	faults := fs.String("faults", "", "simulated faults, e.g. latency=50ms,429=0.1,5xx=0.05 (the list is above)")
	if err := parseFlags(fs, args, 0); err != nil {
		return helped(err)
	}
	var f e2btest.Faults
	if *faults != "" {
		var err error
		if f, err = e2btest.ParseFaults(*faults); err != nil {
			return usageError(fs, fmt.Errorf("--faults: %w", err))
		}
	}
	sim := e2btest.NewUnstartedServer(e2btest.WithFaults(f))
	s, err := serveSim(ctx, fs, *addr, sim.Handler(), func() any { return sim.Sandboxes() })
	if err != nil {
		return err
	}
	host := s.host
	fmt.Fprintf(stdout, "A simulated E2B API is listening on http://%s (Ctrl-C stops it).\n", host)
	if *faults != "" {
		fmt.Fprintf(stdout, "Simulated faults: %s\n", f)
	}
	fmt.Fprintf(stdout, "Use it from another shell:\n\n")
	fmt.Fprintf(stdout, "export E2B_API_URL=http://%s\n", host)
	fmt.Fprintf(stdout, "export E2B_API_KEY=%s\n\n", e2btest.DefaultKey)
	fmt.Fprintf(stdout, "Every sandbox and its fate: curl http://%s%s\n", host, simSandboxesPath)
	return s.wait("demo e2b", sim.Close)
}
