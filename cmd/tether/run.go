package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/tether-run/tether/internal/config"
	"github.com/tether-run/tether/supervisor"
)

// RunCommand is `tether run [flags] -- CMD [ARGS...]`: it runs the agent
// runner as its child and exits with the child's exit status.
type RunCommand struct{}

func (*RunCommand) Synopsis() string { return "run a command under tether's supervision" }

func (*RunCommand) Run(ctx context.Context, args []string) error {
	cfg := config.Default()
	fs := flag.NewFlagSet("tether run", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned (exit 125); -h prints below
	fs.Usage = func() {}
	envErr := cfg.Bind(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stderr)
			fmt.Fprint(os.Stderr, "Usage: tether run [flags] -- CMD [ARGS...]\n\nFlags:\n")
			fs.PrintDefaults()
			return nil
		}
		return usageError(err)
	}
	if envErr != nil {
		return usageError(envErr)
	}
	if err := cfg.Validate(); err != nil {
		return usageError(err)
	}
	command := fs.Args()
	if len(command) == 0 {
		return usageError(supervisor.ErrNoCommand)
	}

	// Catching 60-odd signals takes the Go runtime a few milliseconds:
	// let it overlap the opening of the journal and the socket.
	signals := supervisor.Catch()
	logger := newLogger(cfg, os.Stderr)
	sc, err := openSidecar(cfg, logger)
	if err != nil {
		return &ExitError{Code: ExitCodeUsage, Err: fmt.Errorf("run: %w", err)}
	}
	defer sc.Close()
	actors, err := sc.Actors()
	if err != nil {
		return &ExitError{Code: ExitCodeUsage, Err: fmt.Errorf("run: %w", err)}
	}
	st, err := supervisor.Run(ctx, supervisor.Config{
		Command:         command,
		Env:             sc.ChildEnv(),
		Grace:           cfg.Grace,
		SignalChildOnly: cfg.SignalChildOnly,
		Logger:          logger,
		Actors:          actors,
		AfterChild:      sc.AfterChild,
		Signals:         signals,
	})
	if st.Code == 0 && cfg.OnUnresolved == "exit-code" && sc.Unresolved() > 0 {
		return &ExitError{Code: ExitCodeUnresolved}
	}
	if err != nil {
		// tether's own failure; the child's status still wins when it ran.
		logger.Error("tether failed", "err", err)
		if st.Code == 0 {
			return &ExitError{Code: ExitCodeUsage, Err: err}
		}
	}
	if st.Code == 0 {
		return nil
	}
	// The reason a child could not be started is already logged.
	return &ExitError{Code: st.Code}
}

func usageError(err error) error {
	return &ExitError{Code: ExitCodeUsage, Err: fmt.Errorf("run: %w (see tether run -h)", err)}
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
