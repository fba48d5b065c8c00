package providers

import (
	"context"
	"flag"
	"fmt"

	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/e2b"
	"github.com/tether-run/tether/provider/e2b/e2btest"
)

// E2B's demo: its simulator (e2btest) on loopback. Sandboxes end by their
// timeout (killed, or paused with autoPause) as on the real server.

// e2bDemoAddr: loopback only, beside Daytona's demo port.
const e2bDemoAddr = "127.0.0.1:3987"

func e2bDemo() *Demo {
	return &Demo{
		Title:  "E2B",
		Addr:   e2bDemoAddr,
		Usage:  e2bDemoUsage,
		Flags:  e2bDemoFlags,
		LsAddr: lsAddr(e2b.EnvAPIURL, e2bDemoAddr),
		Runner: e2bRunner,
	}
}

const e2bDemoUsage = `Usage: tether demo e2b [flags]
       tether demo e2b ls [--addr HOST:PORT] [--json]   (default: the host of $E2B_API_URL)

Serves a simulated E2B API (the one tether's tests use) on --addr until
SIGINT or SIGTERM, and prints the two variables to export so that tether
run and an E2B runner use it. Sandboxes end by their timeout (killed, or
paused with autoPause; one ever paused, forked from or snapshotted reads
paused after its timeout) as on the real server; a kill answers 204, then 404.

'ls' lists every sandbox the simulator has seen, killed ones included: its
id, tether's name for it (its tether-name metadata), state, metadata, when
it was created and what killed it ("DELETE from tether" is tether's drain,
replay or sweep; "DELETE from" another client is the runner's own kill;
"timeout" is E2B's). The same as JSON: GET /_sim/sandboxes.

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
  tether demo e2b ls
`

// e2bDemoFlags binds `tether demo e2b`'s own flags.
func e2bDemoFlags(fs *flag.FlagSet) func() (*Stand, error) {
	faults := fs.String("faults", "", "simulated faults, e.g. latency=50ms,429=0.1,5xx=0.05 (the list is above)")
	return func() (*Stand, error) {
		var f e2btest.Faults
		if *faults != "" {
			var err error
			if f, err = e2btest.ParseFaults(*faults); err != nil {
				return nil, fmt.Errorf("--faults: %w", err)
			}
		}
		sim := e2btest.NewUnstartedServer(e2btest.WithFaults(f))
		st := &Stand{
			Handler: sim.Handler(),
			URL:     func(base string) string { return base },
			Env: func(base string) []string {
				return []string{e2b.EnvAPIURL + "=" + base, e2b.EnvAPIKey + "=" + e2btest.DefaultKey}
			},
			Record: func() []DemoSandbox { return demoRecord(sim.Sandboxes(), e2bDemoSandbox) },
			Close:  sim.Close,
		}
		if *faults != "" {
			st.Notes = append(st.Notes, fmt.Sprintf("Simulated faults: %s", f))
		}
		return st, nil
	}
}

// e2bDemoSandbox is one sandbox of E2B's record: named by tether's
// metadata, killed by a DELETE (its caller) or its timeout.
func e2bDemoSandbox(sb e2btest.Sandbox) DemoSandbox {
	d := DemoSandbox{ID: sb.ID, Name: sb.Metadata[e2b.MetadataName], State: sb.State, Labels: sb.Metadata,
		Created: sb.CreatedAt, Gone: sb.State == e2btest.StateKilled, DeletedBy: sb.KilledBy}
	if d.Gone && d.DeletedBy == "" {
		d.DeletedBy = sb.KillReason // its timeout, or a kill orphaned on the node
	}
	switch sb.State {
	case e2btest.StateRunning:
		d.Ends = "timeout at " + sb.EndAt.Local().Format("15:04:05")
		if sb.AutoPause {
			d.Ends = "paused at " + sb.EndAt.Local().Format("15:04:05")
		}
	case e2btest.StatePaused:
		d.Ends, d.Endless = "paused: kept until killed", true
	}
	return d
}

// e2bRunner is E2B's client as a runner reads it, from E2B_API_KEY and
// E2B_API_URL (or E2B_DOMAIN), each create with the SDKs' defaults.
func e2bRunner(RunnerOptions) (RunnerClient, error) {
	cfg, err := e2b.ConfigFromEnv()
	if err != nil {
		return RunnerClient{}, err
	}
	p, err := e2b.New(cfg)
	if err != nil {
		return RunnerClient{}, err
	}
	return RunnerClient{Provider: p, Create: func(ctx context.Context, name string, labels map[string]string) (provider.Sandbox, error) {
		return p.Create(ctx, name, labels, e2b.CreateOptions{})
	}}, nil
}
