package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/demo"
	"github.com/tether-run/tether/internal/demo/samplerunner"
	"github.com/tether-run/tether/internal/providers"
)

// demoCommand is `tether demo`: the whole story on a machine with no
// account (internal/demo). It serves the default provider's simulated API
// on loopback, runs a sample runner under `tether run` (this same binary,
// as real processes), ends it the way production does — SIGTERM as docker
// stop sends it, then a SIGKILL of tether itself and a restart on the same
// journal — and checks with the simulator that every sandbox ended
// confirmed gone.
//
// `tether demo runner [flags]` is the sample runner itself (package
// samplerunner); the demo starts it as tether's child. `tether demo NAME`
// serves provider NAME's simulator alone, and `tether demo NAME ls` lists
// its record: each provider's from the registry (providers.Kind.Demo).
type demoCommand struct{}

func (*demoCommand) Synopsis() string {
	return "show tether draining and replaying sandboxes against a simulated Daytona"
}

func (*demoCommand) Run(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "runner" {
		if code := samplerunner.Main(ctx, args[1:], os.Stdout, os.Stderr); code != 0 {
			return &exitError{Code: code}
		}
		return nil
	}
	if len(args) > 0 {
		if k, ok := providers.Lookup(args[0]); ok && k.Demo != nil {
			switch {
			case len(args) > 1 && args[1] == "ls" && k.Demo.Flags != nil:
				return demoLs(ctx, k, args[2:])
			case k.Demo.Flags != nil:
				return demoServe(ctx, k, args[1:])
			case k.Demo.Story != nil:
				return demoStory(ctx, k, "demo "+k.Name, args[1:])
			}
		}
	}
	k, _ := providers.Lookup(intent.DefaultProvider)
	return demoStory(ctx, k, "demo", args)
}

// demoUsage is the help of `tether demo`: the story, and every provider's
// demo the registry has.
func demoUsage() string {
	var b strings.Builder
	b.WriteString("Usage: tether demo [flags]\n       tether demo runner [flags]   (the sample runner the demo starts)\n")
	for _, k := range providers.Registered() {
		if k.Demo != nil && k.Demo.Flags == nil && k.Demo.Story != nil && k.Name != intent.DefaultProvider {
			fmt.Fprintf(&b, "       %-28s (the same story on the real %s, here)\n", "tether demo "+k.Name+" [flags]", k.Demo.Title)
		}
		if k.Demo == nil || k.Demo.Flags == nil {
			continue
		}
		fmt.Fprintf(&b, "       %-28s (the simulated %s API alone, to try tether against)\n", "tether demo "+k.Name+" [flags]", k.Demo.Title)
		fmt.Fprintf(&b, "       %-28s (what became of every sandbox it saw)\n", "tether demo "+k.Name+" ls")
	}
	b.WriteString("\nRuns the whole story against a simulated Daytona on loopback: a sample runner\nunder tether run, stopped as docker stop does, then tether kill -9ed and\nrestarted on the same journal; exits 0 only if every sandbox ended confirmed gone.\n")
	return b.String()
}

// demoStory tells the story on provider k's stand-in.
func demoStory(ctx context.Context, k providers.Kind, name string, args []string) error {
	fs := newFlags(name, demoUsage())
	sandboxes := fs.Int("sandboxes", 4, "sandboxes the runner creates in each of the two runs")
	faults := fs.String("faults", "", "simulated faults, e.g. latency=50ms,429=0.1,5xx=0.05,create-lost=0.2,destroying=1s,seed=1")
	verbose := fs.Bool("verbose", false, "show every log line of tether (without it, the story: what each step did, in a sentence)")
	if err := parseFlags(fs, args, 0); err != nil {
		return helped(err)
	}
	if *sandboxes < 2 || *sandboxes > 500 {
		return usageError(fs, fmt.Errorf("--sandboxes %d: must be between 2 and 500", *sandboxes))
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("demo: find my own binary: %w", err)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	story, err := demo.NewStory(demo.StoryOptions{Tether: self, Kind: k, Sandboxes: *sandboxes, Faults: *faults,
		Verbose: *verbose, Out: stdout, TTY: isTerminal(os.Stdout)})
	var usage *demo.UsageError
	if errors.As(err, &usage) {
		return usageError(fs, usage.Err)
	}
	if err != nil {
		return err
	}
	defer story.Close()
	ok, err := story.Tell(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return &exitError{Code: 1, Err: errors.New("demo: some sandboxes did not end confirmed gone (see the table)")}
	}
	return nil
}

// demoServe is `tether demo NAME`: provider k's simulator on --addr, with
// the lines to export, until SIGINT or SIGTERM.
func demoServe(ctx context.Context, k providers.Kind, args []string) error {
	name := "demo " + k.Name
	fs := newFlags(name, k.Demo.Usage)
	addr := fs.String("addr", k.Demo.Addr, "address to listen on (port 0: any free port, printed)")
	start := k.Demo.Flags(fs)
	if err := parseFlags(fs, args, 0); err != nil {
		return helped(err)
	}
	st, err := start()
	if err != nil {
		return usageError(fs, err)
	}
	// Before the first line is printed: a SIGTERM from then on stops it
	// cleanly.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := demo.Serve(*addr, st)
	if err != nil {
		st.Close()
		return usageError(fs, fmt.Errorf("--addr %s: %w", *addr, err))
	}
	fmt.Fprintf(stdout, "A simulated %s API is listening on %s (Ctrl-C stops it).\n", k.Demo.Title, st.URL(srv.Base))
	for _, note := range st.Notes {
		fmt.Fprintln(stdout, note)
	}
	fmt.Fprintf(stdout, "Use it from another shell:\n\n")
	env := st.Env(srv.Base)
	for _, kv := range env {
		fmt.Fprintf(stdout, "export %s\n", kv)
	}
	urlVar, _, _ := strings.Cut(env[0], "=")
	fmt.Fprintf(stdout, "\nEvery sandbox and its fate: tether demo %s ls, with %s exported (or curl %s%s)\n", k.Name, urlVar, srv.Base, providers.RecordPath)
	if err := srv.Wait(ctx); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	fmt.Fprintln(stdout, "stopped; the simulated sandboxes are gone with it")
	return nil
}

// demoLs is `tether demo NAME ls`: the record of the running `tether demo
// NAME`, as a table or its JSON.
func demoLs(ctx context.Context, k providers.Kind, args []string) error {
	name := "demo " + k.Name + " ls"
	fs := newFlags(name, fmt.Sprintf("Usage: tether demo %s ls [flags]\n\nLists every sandbox a running `tether demo %s` has seen, deleted ones\nincluded, with what deleted it.\n", k.Name, k.Name))
	addr := fs.String("addr", k.Demo.LsAddr(os.Getenv), "address of the running tether demo "+k.Name+": the host of the API URL exported for it when that is plain http, else "+k.Demo.Addr)
	asJSON := fs.Bool("json", false, "print the simulator's record as JSON")
	if err := parseFlags(fs, args, 0); err != nil {
		return helped(err)
	}
	raw, sbs, err := demo.Record(ctx, *addr)
	switch {
	case errors.Is(err, demo.ErrNothingThere):
		return &exitError{Code: exitCodeUsage, Err: fmt.Errorf("%s: no simulated %s at %s (start one with tether demo %s --addr %s): %w", name, k.Demo.Title, *addr, k.Name, *addr, err)}
	case err != nil:
		return fmt.Errorf("%s: %w", name, err)
	case *asJSON:
		_, err := stdout.Write(raw)
		return err
	}
	demo.PrintRecord(stdout, sbs)
	return nil
}

// isTerminal reports whether f is a terminal (not a pipe or file, as in CI).
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
