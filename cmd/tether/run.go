package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/tether-run/tether/internal/config"
	"github.com/tether-run/tether/internal/sidecar"
	"github.com/tether-run/tether/supervisor"
)

// runCommand is `tether run [flags] -- CMD [ARGS...]`: it runs the agent
// runner as its child and exits with the child's exit status.
type runCommand struct{}

func (*runCommand) Synopsis() string { return "run a command under tether's supervision" }

const runUsage = `Usage: tether run [flags] -- CMD [ARGS...]

Runs CMD as tether's child: forwards signals to its process group, reaps
zombies (as PID 1 or subreaper), serves the intent API to it, drains every
live intent when it ends, and exits with its exit code.

When CMD is tether itself with an operator command (status, drain, sweep,
doctor, intent, version, or none), as in ` + "`docker run IMAGE tether status`" + ` under
the image's ENTRYPOINT ["tether", "run", "--"], tether run does not
supervise it: it runs that command in its own place (exec), exactly as if
typed alone, with the environment and without run's flags; no journal is
opened, replayed or drained. CMD "tether run" and "tether demo" are
supervised as any runner.
`

func (*runCommand) Run(ctx context.Context, args []string) error {
	cfg := config.Default()
	fs := newFlags("run", runUsage)
	envErr := cfg.Bind(fs, config.All, config.Metrics)
	if err := parseConfig(fs, args, -1, &cfg, envErr); err != nil {
		return helped(err)
	}
	command := fs.Args()
	if len(command) == 0 {
		return usageError(fs, supervisor.ErrNoCommand)
	}
	if path, ok := ownCommand(command); ok {
		// `docker run IMAGE tether status`: the image's ENTRYPOINT is
		// `tether run --`, but tether's own operator command is no runner
		// to supervise. Run it in this process's place, as if the
		// entrypoint were not there: no journal opened, nothing replayed
		// or drained under it.
		return execOwn(path, command)
	}

	// Catching 60-odd signals takes the Go runtime a few milliseconds:
	// let it overlap the opening of the journal and the socket.
	signals := supervisor.Catch()
	logger := newLogger(cfg, os.Stderr)
	sc, err := sidecar.Open(cfg, sidecar.Options{Logger: logger, Version: version(), Report: os.Stderr})
	if err != nil {
		return &exitError{Code: exitCodeUsage, Err: fmt.Errorf("run: %w", err)}
	}
	defer sc.Close()
	if err := sc.Listen(); err != nil {
		return &exitError{Code: exitCodeUsage, Err: fmt.Errorf("run: %w", err)}
	}
	st, err := sc.Run(ctx, command, signals)
	if st.Code == 0 && cfg.OnUnresolved == "exit-code" && sc.Unresolved() > 0 {
		return &exitError{Code: exitCodeUnresolved}
	}
	if err != nil {
		// tether's own failure; the child's status still wins when it ran.
		logger.Error("tether failed", "err", err)
		if st.Code == 0 {
			return &exitError{Code: exitCodeUsage, Err: err}
		}
	}
	if st.Code == 0 {
		return nil
	}
	// The reason a child could not be started is already logged.
	return &exitError{Code: st.Code}
}

// newLogger writes tether's logs to w (stderr), never to the child's stdout.
func newLogger(cfg config.Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel)) // Validate has checked it
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	if cfg.LogFormat == "json" {
		h = slog.NewJSONHandler(w, opts)
	} else {
		h = slog.NewTextHandler(w, opts)
	}
	return slog.New(h)
}

// supervisedOwn are tether's own commands that tether run supervises like
// any runner: a nested run, and the demo (whose sample runner is what the
// README runs under tether run). Every other tether command is an
// operator's, run in run's place (ownCommand).
var supervisedOwn = map[string]bool{"run": true, "demo": true}

// ownCommand reports whether command is tether's own operator command
// (status, drain, sweep, doctor, intent, version, help, or no command at
// all) and the path to run it from: command[0] is this very executable, or
// a program named tether. Its first argument (the subcommand) decides.
func ownCommand(command []string) (string, bool) {
	path, err := exec.LookPath(command[0])
	if err != nil {
		return "", false
	}
	if filepath.Base(path) != "tether" && !sameFile(path, selfPath()) {
		return "", false
	}
	if len(command) > 1 && supervisedOwn[command[1]] {
		return "", false
	}
	return path, true
}

func selfPath() string {
	p, err := os.Executable()
	if err != nil {
		return ""
	}
	return p
}

func sameFile(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

// execOwn replaces this process with tether's operator command. It returns
// only when the exec failed.
func execOwn(path string, command []string) error {
	err := syscall.Exec(path, command, os.Environ())
	return &exitError{Code: supervisor.ExitCodeNotExecutable, Err: fmt.Errorf("run: %s: %w", command[0], err)}
}
