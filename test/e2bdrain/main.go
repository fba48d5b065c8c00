// Command e2bdrain is `tether drain` with the E2B provider, for the E2B
// crash tests (test/e2bcrash_test.go): it opens the journal and drains every
// live intent through the same function `tether drain` runs
// (sidecar.Drain), with the E2B provider configured from E2B_API_KEY and
// E2B_API_URL as the SDKs read them. Built with -tags crashpoints, it dies
// of SIGKILL at the point $TETHER_CRASHPOINT names.
//
//	e2bdrain --journal FILE [--drain-timeout D] [--never-created-after D]
//
// Exit: 0 when nothing live is left, 3 when intents stay live, 2 for a
// usage, journal or provider problem.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/tether-run/tether/internal/config"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/internal/sidecar"
	"github.com/tether-run/tether/provider/e2b"
)

func main() {
	cfg := config.Default()
	fs := flag.NewFlagSet("e2bdrain", flag.ContinueOnError)
	fs.StringVar(&cfg.Journal, "journal", "", "the journal to drain")
	fs.DurationVar(&cfg.DrainTimeout, "drain-timeout", 30*time.Second, "deadline of the drain")
	fs.DurationVar(&cfg.NeverCreatedHorizon, "never-created-after", cfg.NeverCreatedHorizon, "a never-seen name older than this closes as never-created")
	if err := fs.Parse(os.Args[1:]); err != nil || cfg.Journal == "" {
		fail(2, "usage: e2bdrain --journal FILE [--drain-timeout D] [--never-created-after D]")
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s := e2b.SetupFromEnv(log.With("component", "e2b"))
	if s.Provider == nil {
		fail(2, "e2b: %v", s.Err())
	}
	if _, err := os.Stat(cfg.Journal); err != nil {
		fail(2, "journal: %v", err)
	}
	j, err := sidecar.OpenJournal(cfg, log)
	if err != nil {
		fail(2, "journal: %v", err)
	}
	defer j.Close()
	if _, err := sidecar.Drain(context.Background(), cfg, j, s.Provider, log, os.Stderr); err != nil {
		j.Close()
		if errors.Is(err, reaper.ErrUnresolved) {
			os.Exit(config.UnresolvedExitCode)
		}
		fail(2, "drain: %v", err)
	}
}

func fail(code int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "e2bdrain: "+format+"\n", args...)
	os.Exit(code)
}
