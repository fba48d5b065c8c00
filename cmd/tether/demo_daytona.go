package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// `tether demo daytona` serves the simulated Daytona API of `tether demo`
// on its own, until SIGINT or SIGTERM, so that a newcomer can point the
// curl examples, the example runners and `tether run` at it without an
// account; `tether demo daytona ls` shows what happened to every sandbox,
// by the simulator's own record (who deleted it included).

const (
	// localDaytonaAddr is the default address: loopback only, and a port
	// no common service claims.
	localDaytonaAddr = "127.0.0.1:3986"
	localDaytonaKey  = "local-key"
	localDaytonaOrg  = "local-org"
	// simSandboxesPath is the simulator's own record, beside the API.
	simSandboxesPath = "/_sim/sandboxes"
	// localDaytonaShutdown bounds how long a stop waits for requests in flight.
	localDaytonaShutdown = 5 * time.Second
	// lsTimeout bounds `ls`'s one request.
	lsTimeout = 10 * time.Second
)

const demoDaytonaUsage = `Usage: tether demo daytona [flags]
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

// demoDaytona runs `tether demo daytona ARGS`.
func demoDaytona(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "ls" {
		return demoDaytonaLs(ctx, args[1:])
	}
	fs := newFlags("demo daytona", demoDaytonaUsage)
	addr := fs.String("addr", localDaytonaAddr, "address to listen on (port 0: any free port, printed)")
	key := fs.String("key", localDaytonaKey, "the API key it accepts (printed for DAYTONA_API_KEY)")
	faults := fs.String("faults", "", "simulated faults, e.g. latency=50ms,429=0.1,5xx=0.05 (the list is above)")
	minute := fs.Duration("minute", time.Minute, "length of Daytona's minute for the auto-stop and auto-delete timers (0: off)")
	if err := parseFlags(fs, args, 0); err != nil {
		return helped(err)
	}
	if *minute < 0 {
		return usageError(fs, fmt.Errorf("--minute %s: must not be negative", *minute))
	}
	if *key == "" {
		return usageError(fs, errors.New("--key: must not be empty"))
	}
	f, err := demoFaults(*faults)
	if err != nil {
		return usageError(fs, fmt.Errorf("--faults: %w", err))
	}
	sim := daytonatest.NewUnstartedServer(
		daytonatest.WithCreateDelay(demoCreateDelay),
		daytonatest.WithDestroyDelay(demoDestroyDelay),
		daytonatest.WithFaults(f),
		daytonatest.WithMinute(*minute),
	)
	sim.AddKey(*key, localDaytonaOrg)
	s, err := serveSim(ctx, fs, *addr, sim.Handler(), func() any { return simRecord(sim) })
	if err != nil {
		return err
	}
	host := s.host
	fmt.Fprintf(stdout, "A simulated Daytona API is listening on http://%s/api (Ctrl-C stops it).\n", host)
	if *faults != "" {
		fmt.Fprintf(stdout, "Simulated faults: %s\n", f)
	}
	if *minute != time.Minute {
		fmt.Fprintf(stdout, "Daytona's minute lasts %s here (auto-stop and auto-delete timers).\n", *minute)
	}
	fmt.Fprintf(stdout, "Use it from another shell:\n\n")
	fmt.Fprintf(stdout, "export DAYTONA_API_URL=http://%s/api\n", host)
	fmt.Fprintf(stdout, "export DAYTONA_API_KEY=%s\n\n", *key)
	fmt.Fprintf(stdout, "Every sandbox and its fate: tether demo daytona ls, with DAYTONA_API_URL exported (or curl http://%s%s)\n", host, simSandboxesPath)
	return s.wait("demo daytona", sim.Close)
}

// simSandbox is one sandbox of GET /_sim/sandboxes.
type simSandbox struct {
	ID        string            `json:"id"`
	Name      string            `json:"name"`
	State     string            `json:"state"`
	Labels    map[string]string `json:"labels"`
	AutoStop  int               `json:"autoStopInterval"`
	Created   time.Time         `json:"createdAt"`
	DeletedBy string            `json:"deletedBy,omitempty"`
}

func simRecord(sim *daytonatest.Server) []simSandbox {
	all := sim.Sandboxes()
	out := make([]simSandbox, 0, len(all))
	for _, sb := range all {
		out = append(out, simSandbox{ID: sb.ID, Name: sb.Name, State: sb.State, Labels: sb.Labels,
			AutoStop: sb.AutoStopInterval, Created: sb.CreatedAt, DeletedBy: sb.DeletedBy})
	}
	return out
}

// demoDaytonaLs runs `tether demo daytona ls`.
func demoDaytonaLs(ctx context.Context, args []string) error {
	fs := newFlags("demo daytona ls", "Usage: tether demo daytona ls [flags]\n\nLists every sandbox a running `tether demo daytona` has seen, deleted ones\nincluded, with what deleted it.\n")
	addr := fs.String("addr", lsDefaultAddr(), "address of the running tether demo daytona (default: the host of an http $DAYTONA_API_URL, else "+localDaytonaAddr+")")
	asJSON := fs.Bool("json", false, "print the simulator's record as JSON")
	if err := parseFlags(fs, args, 0); err != nil {
		return helped(err)
	}
	ctx, cancel := context.WithTimeout(ctx, lsTimeout)
	defer cancel()
	target := "http://" + *addr + simSandboxesPath
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return usageError(fs, fmt.Errorf("--addr %s: %w", *addr, err))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return &ExitError{Code: ExitCodeUsage, Err: fmt.Errorf("demo daytona ls: no simulated Daytona at %s (start one with tether demo daytona --addr %s): %w", *addr, *addr, err)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("demo daytona ls: %s: %w", target, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("demo daytona ls: %s answered %s; is it a tether demo daytona?", target, resp.Status)
	}
	if *asJSON {
		_, err := stdout.Write(body)
		return err
	}
	var sbs []simSandbox
	if err := json.Unmarshal(body, &sbs); err != nil {
		return fmt.Errorf("demo daytona ls: %s: %w", target, err)
	}
	printSimSandboxes(stdout, sbs)
	return nil
}

// lsDefaultAddr is the simulator the user's shell points at: the one whose
// export lines were pasted, when its DAYTONA_API_URL is plain http (the
// simulator's; the real API is https).
func lsDefaultAddr() string {
	if u, err := url.Parse(os.Getenv("DAYTONA_API_URL")); err == nil && u.Scheme == "http" && u.Host != "" {
		return u.Host
	}
	return localDaytonaAddr
}

func printSimSandboxes(w io.Writer, sbs []simSandbox) {
	if len(sbs) == 0 {
		fmt.Fprintln(w, "no sandboxes yet")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSTATE\tLABELS\tCREATED\tDELETED BY")
	alive := 0
	for _, sb := range sbs {
		by := sb.DeletedBy
		if by == "" {
			by = "-"
			alive++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", sb.ID, creationName(sb.Name), sb.State, formatLabels(sb.Labels), sb.Created.Local().Format("15:04:05"), by)
	}
	tw.Flush()
	fmt.Fprintf(w, "%d sandboxes, %d never deleted\n", len(sbs), alive)
}

func formatLabels(labels map[string]string) string {
	if len(labels) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + "=" + labels[k]
	}
	return strings.Join(keys, ",")
}
