// Command tether is a sidecar supervisor for AI-agent runners that create
// cloud sandboxes: it runs the runner as its child, journals every sandbox
// the runner declares, and deletes them all when the runner dies.
//
// main only dispatches to a subcommand and maps its error to an exit code.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/tether-run/tether/supervisor"
)

// command is one subcommand. Run returns nil for exit 0, an *exitError for a
// chosen exit code, or any other error for tether's own failure (exit 125).
type command interface {
	Run(ctx context.Context, args []string) error
	Synopsis() string
}

// commands maps each subcommand name to its implementation.
var commands = map[string]command{
	"version": &versionCommand{},
	"run":     &runCommand{},
	"intent":  &intentCommand{},
	"demo":    &demoCommand{},
	"drain":   &drainCommand{},
	"status":  &statusCommand{}, // status.go
	"sweep":   &sweepCommand{},  // sweep.go
	"doctor":  &doctorCommand{}, // doctor.go
}

// exitCodeUsage is tether's exit code for its own errors: bad flags, no
// command, a journal it cannot open (supervisor.ExitCodeOwnError).
const exitCodeUsage = supervisor.ExitCodeOwnError

// exitError carries an exit code chosen by a subcommand (e.g. the child's).
// Err, if set, is printed; a nil Err exits silently with Code.
type exitError struct {
	Code int
	Err  error
}

func (e *exitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *exitError) Unwrap() error { return e.Err }

func main() {
	os.Exit(runMain(context.Background(), os.Args[1:]))
}

// runMain runs the subcommand named by args[0] and returns the process exit code.
func runMain(ctx context.Context, args []string) int {
	switch {
	case len(args) == 0:
		usage(os.Stderr)
		return exitCodeUsage
	case args[0] == "-h" || args[0] == "--help" || args[0] == "help":
		usage(stdout)
		return 0
	case args[0] == "--version" || args[0] == "-version":
		args = []string{"version"}
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "tether: unknown command %q (see tether -h)\n", args[0])
		return exitCodeUsage
	}
	err := cmd.Run(ctx, args[1:])
	return exitCode(err)
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.Err != nil {
			fmt.Fprintf(os.Stderr, "tether: %v\n", ee.Err)
		}
		return ee.Code
	}
	fmt.Fprintf(os.Stderr, "tether: %v\n", err)
	return exitCodeUsage
}

func usage(w io.Writer) {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("tether: a sidecar supervisor that makes sure no sandbox outlives its runner.\n\nUsage:\n  tether <command> [flags] [args]\n\nCommands:\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  %-8s %s\n", n, commands[n].Synopsis())
	}
	b.WriteString("\nRun 'tether <command> -h' for the flags of a command; 'tether --version' for the version.\n")
	fmt.Fprint(w, b.String())
}
