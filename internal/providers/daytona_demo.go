package providers

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/daytona"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// Daytona's demo: its simulator (daytonatest) on loopback, at the pace of
// the real server (a delete renames the sandbox and destroys it
// asynchronously), with its auto-stop and auto-delete timers.

const (
	// daytonaDemoAddr: loopback only, and a port no common service claims.
	daytonaDemoAddr = "127.0.0.1:3986"
	daytonaDemoKey  = "local-key"
	daytonaDemoOrg  = "local-org"
	// The simulated API answers after daytonaDemoLatency; sandboxes take
	// daytonaDemoCreate to start and daytonaDemoDestroy to be destroyed
	// after a delete.
	daytonaDemoLatency = 20 * time.Millisecond
	daytonaDemoCreate  = 200 * time.Millisecond
	daytonaDemoDestroy = 300 * time.Millisecond
)

func daytonaDemo() *Demo {
	return &Demo{
		Title: "Daytona",
		Addr:  daytonaDemoAddr,
		Usage: daytonaDemoUsage,
		Flags: daytonaDemoFlags,
		Story: func(faults string) (*Stand, error) {
			f, err := daytonaFaults(faults)
			if err != nil {
				return nil, err
			}
			st := daytonaStand(f, daytonaDemoKey, 0)
			if faults != "" {
				st.Notes = append(st.Notes, fmt.Sprintf("simulated faults: %s", f))
			}
			st.Run = []string{"--daytona-proxy=false"}
			st.Backstop = "with Daytona's auto-stop set to 0 (disabled), as some runners leave it: then no server-side cleanup ever comes"
			return st, nil
		},
		LsAddr: lsAddr(daytona.EnvAPIURL, daytonaDemoAddr),
		Runner: daytonaRunner,
	}
}

const daytonaDemoUsage = `Usage: tether demo daytona [flags]
       tether demo daytona ls [--addr HOST:PORT] [--json]   (default: the host of $DAYTONA_API_URL)

Serves a simulated Daytona API (the one tether's tests and demo use) on
--addr until SIGINT or SIGTERM, and prints the two variables to export so
that curl, the example runners and tether run use it. Sandboxes move
through Daytona's states with realistic delays; a delete renames a sandbox
and destroys it asynchronously, as the real server does.

'ls' lists every sandbox the simulator has seen, deleted ones included:
its id, name, state, labels, when it was created and what deleted it
("DELETE from tether" is tether's drain, replay or sweep; "DELETE from"
another client is the runner's own delete; "auto-stop (ephemeral)" and
"auto-delete" are Daytona's timers). The same as JSON: GET /_sim/sandboxes.

--faults takes comma-separated key=value pairs:
  seed=1               generator seed, so that a run can be repeated
  latency=50ms         added to every call
  5xx=0.05             share of calls answered 503
  429=0.1              share of calls answered 429
  retry-after=2s       the Retry-After-<throttler> sent with a 429
  hang=0.01            share of calls that hang
  create-lost=0.2      share of creates that allocate, then answer 500
  create-hang=0.1      share of creates that allocate, then hang
  create-fail-start=0.1 share of creates whose sandbox fails to start
  404=0.01             share of calls on a sandbox answered 404 though it exists
  403=0.01             share of calls answered 403
  modified=0.1         share of setter calls answered 409
  destroying=2s        extra time a delete stays destroying
  destroy-fail=0.1     share of deletes that fail on the runner (error, hidden, never retried)
  destroy-lag=10s      up to this much extra time a deleted sandbox keeps its state
  starting=1s          time a new sandbox stays starting
  list-lag=1s          the list shows the world this long ago
  routes=get+delete    limit latency, 5xx, 429 and hang to these routes

--minute is the length of Daytona's minute for its auto-stop and
auto-delete timers (and its 10 s checks, scaled alike): 1m is the real
pace, 1s makes an auto-stop of 2 minutes fire after about 2 s; 0 turns the
timers off.

Example:
  tether demo daytona &
  export DAYTONA_API_URL=http://127.0.0.1:3986/api DAYTONA_API_KEY=local-key
  tether run -- tether demo runner --sandboxes 3 --exit 0
  tether demo daytona ls
`

// daytonaDemoFlags binds `tether demo daytona`'s own flags.
func daytonaDemoFlags(fs *flag.FlagSet) func() (*Stand, error) {
	key := fs.String("key", daytonaDemoKey, "the API key it accepts (printed for DAYTONA_API_KEY)")
	faults := fs.String("faults", "", "simulated faults, e.g. latency=50ms,429=0.1,5xx=0.05 (the list is above)")
	minute := fs.Duration("minute", time.Minute, "length of Daytona's minute for the auto-stop and auto-delete timers (0: off)")
	return func() (*Stand, error) {
		if *minute < 0 {
			return nil, fmt.Errorf("--minute %s: must not be negative", *minute)
		}
		if *key == "" {
			return nil, errors.New("--key: must not be empty")
		}
		f, err := daytonaFaults(*faults)
		if err != nil {
			return nil, fmt.Errorf("--faults: %w", err)
		}
		st := daytonaStand(f, *key, *minute)
		if *faults != "" {
			st.Notes = append(st.Notes, fmt.Sprintf("Simulated faults: %s", f))
		}
		if *minute != time.Minute {
			st.Notes = append(st.Notes, fmt.Sprintf("Daytona's minute lasts %s here (auto-stop and auto-delete timers).", *minute))
		}
		return st, nil
	}
}

// daytonaFaults reads a --faults spec on top of the demo's own latency.
func daytonaFaults(faults string) (daytonatest.Faults, error) {
	spec := "latency=" + daytonaDemoLatency.String()
	if faults != "" {
		spec += "," + faults
	}
	return daytonatest.ParseFaults(spec)
}

// daytonaStand is the simulator, unstarted, accepting key; minute is the
// length of its timers' minute (0: off).
func daytonaStand(f daytonatest.Faults, key string, minute time.Duration) *Stand {
	sim := daytonatest.NewUnstartedServer(
		daytonatest.WithCreateDelay(daytonaDemoCreate),
		daytonatest.WithDestroyDelay(daytonaDemoDestroy),
		daytonatest.WithFaults(f),
		daytonatest.WithMinute(minute),
	)
	sim.AddKey(key, daytonaDemoOrg)
	return &Stand{
		Handler: sim.Handler(),
		URL:     func(base string) string { return base + "/api" },
		Env: func(base string) []string {
			return []string{daytona.EnvAPIURL + "=" + base + "/api", daytona.EnvAPIKey + "=" + key}
		},
		Record: func() []DemoSandbox { return demoRecord(sim.Sandboxes(), daytonaDemoSandbox) },
		Close:  sim.Close,
	}
}

func daytonaDemoSandbox(sb daytonatest.Sandbox) DemoSandbox {
	d := DemoSandbox{ID: sb.ID, Name: creationName(sb.Name), State: sb.State, Labels: sb.Labels,
		Created: sb.CreatedAt, Gone: sb.State == provider.StateDestroyed, DeletedBy: sb.DeletedBy}
	switch {
	case d.Gone:
	case sb.AutoStopInterval > 0:
		d.Ends = fmt.Sprintf("auto-stop %d min", sb.AutoStopInterval)
	default:
		d.Ends, d.Endless = "auto-stop off", true
	}
	return d
}

// creationName undoes Daytona's rename of a deleted sandbox
// (DESTROYED_<name>_<unix ms>), to show the name it was created with.
func creationName(name string) string {
	rest, ok := strings.CutPrefix(name, "DESTROYED_")
	if !ok {
		return name
	}
	if i := strings.LastIndex(rest, "_"); i > 0 {
		return rest[:i]
	}
	return rest
}

// daytonaRunner is Daytona's client as a runner reads it, from
// DAYTONA_API_URL and DAYTONA_API_KEY (or a JWT), each create with
// o.AutoStop.
func daytonaRunner(o RunnerOptions) (RunnerClient, error) {
	cfg, err := daytona.ConfigFromEnv()
	if err != nil {
		return RunnerClient{}, err
	}
	p, err := daytona.New(cfg)
	if err != nil {
		return RunnerClient{}, err
	}
	autoStop := o.AutoStop
	return RunnerClient{Provider: p, Create: func(ctx context.Context, name string, labels map[string]string) (provider.Sandbox, error) {
		return p.Create(ctx, name, labels, &autoStop)
	}}, nil
}
