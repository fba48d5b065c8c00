package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/tether-run/tether/internal/config"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/spool"
)

// DefaultOfflineDrainTimeout is the deadline of `tether drain`: no docker
// stop is waiting, so it can afford longer than the in-container drain.
const DefaultOfflineDrainTimeout = 2 * time.Minute

// ExitCodeUnresolved is the exit code of `tether drain` (and of `tether
// run --on-unresolved=exit-code`) when intents were left live.
const ExitCodeUnresolved = config.UnresolvedExitCode

// DrainCommand is `tether drain --journal PATH`: resolve a journal offline,
// e.g. from a host cron after a container died with its journal on a volume.
type DrainCommand struct{}

func (*DrainCommand) Synopsis() string {
	return "resolve every live intent of a journal now (no child), and report"
}

var drainUsage = `Usage: tether drain [--journal PATH] [--drain-timeout D] [flags]

Deletes (or stops) every sandbox the journal still holds live, owner-verified
and confirmed gone, with the Daytona credentials of the environment.
Exit: 0 when nothing live is left, ` + fmt.Sprint(ExitCodeUnresolved) + ` when intents stay live, ` + fmt.Sprint(ExitCodeUsage) + ` for a
usage error or a journal that cannot be opened.
`

func (*DrainCommand) Run(ctx context.Context, args []string) error {
	cfg := config.Default()
	cfg.DrainTimeout = DefaultOfflineDrainTimeout
	fs := newFlags("drain", drainUsage)
	envErr := cfg.Bind(fs, config.Journal, config.Drain, config.Log)
	if err := parseFlags(fs, args, 0); err != nil {
		return helped(err)
	}
	if envErr != nil {
		return usageError(fs, envErr)
	}
	if err := cfg.Validate(); err != nil {
		return usageError(fs, err)
	}
	if _, err := os.Stat(cfg.Journal); err != nil {
		// Never create an empty journal where the operator expected one.
		return &ExitError{Code: ExitCodeUsage, Err: fmt.Errorf("drain: journal %s: %w", cfg.Journal, err)}
	}
	log := newLogger(cfg, os.Stderr)
	j, err := spool.Open(cfg.Journal, spool.Options{})
	if err != nil {
		return &ExitError{Code: ExitCodeUsage, Err: fmt.Errorf("drain: %w", err)}
	}
	defer j.Close()
	prov, err := openProvider(log)
	if err != nil {
		return &ExitError{Code: ExitCodeUsage, Err: fmt.Errorf("drain: %w", err)}
	}
	r := newReaper(cfg, j, prov, log)
	if _, err := r.DrainLive(ctx, j, cfg.DrainTimeout, os.Stderr); err != nil {
		if errors.Is(err, reaper.ErrUnresolved) {
			return &ExitError{Code: ExitCodeUnresolved}
		}
		return err
	}
	return nil
}
