package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

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
