// Package samplerunner is a stand-in for an AI-agent runner, used by
// `tether demo` (as `tether demo runner`) and the end-to-end tests (as
// test/runner): it declares each sandbox to tether over the socket API,
// creates it with the name and labels tether chose, through the
// provider's client as the registry gives it to a runner
// (providers.Demo.Runner: on Daytona the official api-client-go; on E2B
// the SDKs' POST /sandboxes, the labels as its metadata), reports the id,
// and then behaves like a runner that is about to be killed — it holds
// the sandboxes and never cleans up (its `finally` never runs).
//
// A Go runner to copy is examples/go, which imports only public packages.
//
// It prints one line per event on stdout so a test or the demo can follow it
// without sleeping:
//
//	created <intent-id> <name> <sandbox-id>
//	unobserved <intent-id> <name> <sandbox-id>   (id never reported to tether)
//	lost <intent-id> <name> -                     (create failed; it may or may not have landed)
//	released <intent-id> <name> <sandbox-id>
//	declared <intent-id> <name> -                  (declared, never created: --declared)
//	pid <pid>                                      (its own pid, first: --print-pid)
//	ready
package samplerunner

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/intentapi"
	"github.com/tether-run/tether/intentapi/client"
	"github.com/tether-run/tether/internal/providers"
	"github.com/tether-run/tether/provider"
)

// Options say what the runner does.
type Options struct {
	// Sandboxes is how many sandboxes it declares and creates.
	Sandboxes int
	// Unobserved: of those, how many (the last ones) it creates but never
	// reports the id of — as if it died between the create and the observe.
	Unobserved int
	// Released: of those, how many (the first ones) it deletes itself and
	// releases, as a runner whose cleanup did run for them.
	Released int
	// Label is added to every intent as run=<Label>.
	Label string
	// Provider is the cloud it declares and creates each sandbox in: a
	// registered provider's name (intent.DefaultProvider when empty), or
	// several, comma-separated ("daytona,e2b": the sandboxes alternate,
	// the first on the first). tether must have their credentials too.
	Provider string
	// AutoStop is Daytona's autoStopInterval sent on create; 0 reproduces the
	// leak of real runners (auto-stop off disables Daytona's own cleanup), which tether's backstop then repairs.
	// An E2B sandbox gets the SDKs' default timeout, 300 s.
	AutoStop int
	// Exit: after "ready", exit with this code at once; -1 holds until a
	// signal, which then kills the runner with no cleanup.
	Exit int
	// WaitIdle: after "ready", wait until tether has no live intent (its
	// boot replay is done), then exit 0.
	WaitIdle bool
	// Declared: after the sandboxes, how many more intents it declares but
	// never creates, as a runner that died between the declare and the
	// create (or whose create is still on its way).
	Declared int
	// PrintPID: print "pid <pid>" first, so a test can kill the runner alone.
	PrintPID bool
	// CleanupOnSignal: on SIGTERM/SIGINT, delete and release every sandbox
	// it holds, as a runner whose shutdown handler runs within tether's
	// grace period (as a runner with its own shutdown handler does), then exit 0.
	CleanupOnSignal bool
}

// createAttempts bounds the runner's own retries of a create that failed
// with a retryable error (429, 5xx, timeout), as SDK callers do.
const createAttempts = 5

// Main parses args (the flags of Options) and runs the runner; it returns
// the process exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("runner", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // a bad flag is one line, below
	var o Options
	fs.IntVar(&o.Sandboxes, "sandboxes", 3, "sandboxes to create")
	fs.IntVar(&o.Unobserved, "unobserved", 0, "of those, how many are created but never reported to tether")
	fs.IntVar(&o.Released, "released", 0, "of those, how many the runner deletes and releases itself")
	fs.StringVar(&o.Label, "label", "demo", "value of the run=<label> scope label")
	fs.StringVar(&o.Provider, "provider", intent.DefaultProvider, "the cloud it creates in: "+strings.Join(providers.Names(), ", ")+", or several comma-separated (they alternate)")
	fs.IntVar(&o.AutoStop, "autostop", 0, "Daytona's autoStopInterval minutes sent on create (0: off, which disables Daytona's own cleanup)")
	fs.IntVar(&o.Exit, "exit", -1, "exit with this code once ready; -1 holds until a signal")
	fs.BoolVar(&o.WaitIdle, "wait-idle", false, "once ready, wait until tether has no live intent, then exit 0")
	fs.IntVar(&o.Declared, "declared", 0, "intents declared after the sandboxes but never created")
	fs.BoolVar(&o.PrintPID, "print-pid", false, `print "pid <pid>" first`)
	fs.BoolVar(&o.CleanupOnSignal, "cleanup-on-signal", false, "on SIGTERM/SIGINT, delete and release every sandbox held, then exit 0")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: runner [flags]\n\nThe sample runner: declares each sandbox to tether before creating it in\nDaytona (or E2B), reports its id, and holds them until it is stopped.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			// Asked for: the usage is output (stdout), and not a failure.
			fs.SetOutput(stdout)
			fs.Usage()
			return 0
		}
		fmt.Fprintf(stderr, "runner: %v (see -h)\n", err)
		return 2
	}
	if err := Run(ctx, o, stdout); err != nil {
		fmt.Fprintf(stderr, "runner: %v\n", err)
		return 1
	}
	return 0
}

// Run does what o says. With o.Exit >= 0 it exits the process itself.
func Run(ctx context.Context, o Options, stdout io.Writer) error {
	if o.Sandboxes < 0 || o.Unobserved < 0 || o.Released < 0 || o.Declared < 0 {
		return errors.New("--sandboxes, --unobserved, --released and --declared must not be negative")
	}
	if o.Unobserved+o.Released > o.Sandboxes {
		return fmt.Errorf("--unobserved %d plus --released %d is more than --sandboxes %d", o.Unobserved, o.Released, o.Sandboxes)
	}
	sock := os.Getenv("TETHER_SOCKET")
	if sock == "" {
		return errors.New("TETHER_SOCKET is not set: run me under tether run")
	}
	clouds, err := openClouds(o)
	if err != nil {
		return err
	}
	tether := client.New(sock)
	var held []heldSandbox // created, observed, not released
	if o.PrintPID {
		fmt.Fprintf(stdout, "pid %d\n", os.Getpid())
	}
	for i := 0; i < o.Sandboxes; i++ {
		cl := clouds[i%len(clouds)]
		in, err := declare(ctx, tether, o.Label, cl.name, strconv.Itoa(i))
		if err != nil {
			return fmt.Errorf("declare sandbox %d: %w", i, err)
		}
		sb, err := cl.createRetried(ctx, in)
		if err != nil {
			// The create may have landed before it failed (the Paperclip
			// seed); only tether can find out, by the name.
			fmt.Fprintf(stdout, "lost %s %s - %v\n", in.ID, in.Name, err)
			continue
		}
		if i >= o.Sandboxes-o.Unobserved {
			fmt.Fprintf(stdout, "unobserved %s %s %s\n", in.ID, in.Name, sb.ID)
			continue
		}
		if _, err := tether.Observe(ctx, in.ID, sb.ID); err != nil {
			return fmt.Errorf("observe %s: %w", in.Name, err)
		}
		if i < o.Released {
			if err := cl.Delete(ctx, sb.ID); err != nil {
				return fmt.Errorf("delete %s: %w", in.Name, err)
			}
			if _, err := tether.Release(ctx, in.ID, "deleted"); err != nil {
				return fmt.Errorf("release %s: %w", in.Name, err)
			}
			fmt.Fprintf(stdout, "released %s %s %s\n", in.ID, in.Name, sb.ID)
			continue
		}
		fmt.Fprintf(stdout, "created %s %s %s\n", in.ID, in.Name, sb.ID)
		held = append(held, heldSandbox{in, sb.ID, cl})
	}
	for i := 0; i < o.Declared; i++ {
		in, err := declare(ctx, tether, o.Label, clouds[0].name, "declared-"+strconv.Itoa(i))
		if err != nil {
			return fmt.Errorf("declare intent %d: %w", i, err)
		}
		fmt.Fprintf(stdout, "declared %s %s -\n", in.ID, in.Name)
	}
	fmt.Fprintln(stdout, "ready")
	if o.WaitIdle {
		return waitIdle(ctx, tether)
	}
	if o.Exit >= 0 {
		os.Exit(o.Exit)
	}
	// Hold the sandboxes like a runner mid-run. A signal ends the process
	// the way it ends a Node or Python runner with no handler: at once,
	// with no cleanup.
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	select {
	case s := <-c:
		if o.CleanupOnSignal {
			return cleanup(ctx, tether, held, stdout)
		}
		signal.Reset()
		_ = syscall.Kill(os.Getpid(), s.(syscall.Signal))
		select {}
	case <-ctx.Done():
		return ctx.Err()
	}
}

// declare asks tether for an intent of provider prov under run=<label>,
// with an idempotency key unique to this sandbox of this run, so a retried
// request is harmless.
func declare(ctx context.Context, tether *client.Client, label, prov, which string) (intentapi.Intent, error) {
	req := intentapi.CreateRequest{
		Labels:  map[string]string{"run": label},
		OnDrain: intent.DrainDelete,
		Key:     label + "-" + which,
	}
	// The default provider's declarations name none, as a Daytona
	// runner's do.
	if prov != intent.DefaultProvider {
		req.Provider = prov
	}
	return tether.CreateIntent(ctx, req)
}

// cloud is a provider the runner creates in, with its client; a cloud
// with no client is one it never creates in.
type cloud struct {
	name string
	providers.RunnerClient
}

// openClouds returns the clouds of o.Provider in order, each opened with
// its credentials from the environment only if a sandbox will be created
// in it: a runner with nothing to create (a replay's --sandboxes 0
// --wait-idle) needs none.
func openClouds(o Options) ([]*cloud, error) {
	names := strings.Split(o.Provider, ",")
	if o.Provider == "" {
		names = []string{intent.DefaultProvider}
	}
	clouds := make([]*cloud, len(names))
	for i, name := range names {
		k, ok := providers.Lookup(name)
		if !ok || k.Demo == nil || k.Demo.Runner == nil || slices.Contains(names[:i], name) {
			return nil, fmt.Errorf("--provider %q: want %s, or several comma-separated", o.Provider, strings.Join(runnable(), ", "))
		}
		clouds[i] = &cloud{name: name}
		if i >= o.Sandboxes {
			continue
		}
		// The provider's credentials, from the environment as its SDKs
		// read them (under tether run, its API URL is tether's proxy).
		c, err := k.Demo.Runner(providers.RunnerOptions{AutoStop: o.AutoStop})
		if err != nil {
			return nil, err
		}
		clouds[i].RunnerClient = c
	}
	return clouds, nil
}

// runnable names the providers the runner can create in.
func runnable() []string {
	var names []string
	for _, k := range providers.Registered() {
		if k.Demo != nil && k.Demo.Runner != nil {
			names = append(names, k.Name)
		}
	}
	return names
}

type heldSandbox struct {
	in        intentapi.Intent
	sandboxID string
	cloud     *cloud
}

// cleanup is a runner's own shutdown handler: it deletes each sandbox it
// holds and tells tether, which must still be serving during its grace.
func cleanup(ctx context.Context, tether *client.Client, held []heldSandbox, stdout io.Writer) error {
	var errs []error
	for _, h := range held {
		if err := h.cloud.Delete(ctx, h.sandboxID); err != nil && !errors.Is(err, provider.ErrNotFound) {
			errs = append(errs, fmt.Errorf("delete %s: %w", h.in.Name, err))
			continue
		}
		if _, err := tether.Release(ctx, h.in.ID, "deleted"); err != nil {
			errs = append(errs, fmt.Errorf("release %s: %w", h.in.Name, err))
			continue
		}
		fmt.Fprintf(stdout, "released %s %s %s\n", h.in.ID, h.in.Name, h.sandboxID)
	}
	return errors.Join(errs...)
}

// createRetried makes the sandbox, retrying what a retry can fix. A retry
// that answers 409 means an earlier attempt landed although its answer was
// lost.
func (c *cloud) createRetried(ctx context.Context, in intentapi.Intent) (provider.Sandbox, error) {
	var err error
	for attempt := 1; attempt <= createAttempts; attempt++ {
		var sb provider.Sandbox
		sb, err = c.Create(ctx, in.Name, in.Labels)
		if err == nil {
			return sb, nil
		}
		if errors.Is(err, provider.ErrConflict) || !provider.Retryable(err) {
			return provider.Sandbox{}, err
		}
		select {
		case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
		case <-ctx.Done():
			return provider.Sandbox{}, ctx.Err()
		}
	}
	return provider.Sandbox{}, err
}

// waitIdle polls tether until no intent is live.
func waitIdle(ctx context.Context, tether *client.Client) error {
	for {
		h, err := tether.Health(ctx)
		if err != nil {
			return err
		}
		if h.Live == 0 {
			return nil
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Line is one line the runner prints (see the package doc), read back by
// ParseLine: an event about one intent (How is created, unobserved, lost,
// released or declared), its pid, or ready.
type Line struct {
	How     string // the first word: an event, "pid" or "ready"
	Intent  string
	Name    string
	Sandbox string // "-" when it has none
	Rest    string // what follows: why a create was lost
	PID     int    // of a "pid" line
}

// ParseLine reads one line of the runner's output; ok is false for a line
// it never prints.
func ParseLine(s string) (l Line, ok bool) {
	f := strings.Fields(s)
	switch {
	case len(f) == 1 && f[0] == "ready":
		return Line{How: "ready"}, true
	case len(f) == 2 && f[0] == "pid":
		pid, err := strconv.Atoi(f[1])
		return Line{How: "pid", PID: pid}, err == nil
	case len(f) >= 4:
		return Line{How: f[0], Intent: f[1], Name: f[2], Sandbox: f[3], Rest: strings.Join(f[4:], " ")}, true
	}
	return Line{}, false
}
