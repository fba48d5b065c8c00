package sidecar

import (
	"log/slog"

	"github.com/tether-run/tether/internal/config"
	"github.com/tether-run/tether/internal/crashpoint"
	"github.com/tether-run/tether/internal/providers"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider"
)

// What `tether run`, `tether drain` and `tether sweep` open alike.

// OpenJournal opens the journal at cfg.Journal for writing, refusing one
// another tether holds (journal.ErrLocked), and prunes in the background
// what ended longer than cfg.Retention ago until it is closed.
func OpenJournal(cfg config.Config, log *slog.Logger) (*journal.Journal, error) {
	return journal.Open(cfg.Journal, journal.Options{Logger: log.With("component", "journal"), Retention: cfg.Retention, CrashPoint: crashpoint.Hit})
}

// OpenProviders reads every registered provider's setup from the
// environment, saying where each setting came from at debug level.
func OpenProviders(cfg config.Config, log *slog.Logger) providers.Opened {
	return providers.Open(providers.OpenOptions{Config: cfg, Logger: log, Level: slog.LevelDebug})
}

// NewReaper is the reaper of `tether run` and `tether drain` alike.
func NewReaper(cfg config.Config, j *journal.Journal, set provider.Set, log *slog.Logger) *reaper.Reaper {
	return &reaper.Reaper{
		Journal:             j,
		Providers:           set,
		Logger:              log.With("component", "reaper"),
		AutoStopMinutes:     cfg.DaytonaAutoStop,
		NeverCreatedHorizon: cfg.NeverCreatedHorizon,
		Concurrency:         cfg.DrainConcurrency,
		RestoreWindow:       cfg.E2BRestoreWindow,
	}
}
