package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/tether-run/tether/internal/config"
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

func (*DrainCommand) Run(ctx context.Context, args []string) error {
	cfg := config.Default()
	cfg.DrainTimeout = DefaultOfflineDrainTimeout
	fs := flag.NewFlagSet("tether drain", flag.ContinueOnError)
	envErr := cfg.Bind(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: tether drain [--journal PATH] [--drain-timeout D]\n\n"+
			"Deletes (or stops) every sandbox the journal still holds live, owner-verified and\n"+
			"confirmed gone, with the Daytona credentials of the environment. Exits 0 when nothing\n"+
			"live is left, "+fmt.Sprint(ExitCodeUnresolved)+" otherwise.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return &ExitError{Code: ExitCodeUsage, Err: fmt.Errorf("drain: %w", err)}
	}
	if envErr != nil {
		return &ExitError{Code: ExitCodeUsage, Err: fmt.Errorf("drain: %w", envErr)}
	}
	if fs.NArg() > 0 {
		return &ExitError{Code: ExitCodeUsage, Err: fmt.Errorf("drain: unexpected argument %q", fs.Arg(0))}
	}
	if err := cfg.Validate(); err != nil {
		return &ExitError{Code: ExitCodeUsage, Err: fmt.Errorf("drain: %w", err)}
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
	if _, err := drainJournal(ctx, j, r, cfg.DrainTimeout, log, os.Stderr); err != nil {
		if errors.Is(err, errUnresolved) {
			return &ExitError{Code: ExitCodeUnresolved}
		}
		return err
	}
	return nil
}
