package sidecar

import (
	"log/slog"

	"github.com/tether-run/tether/internal/config"
	"github.com/tether-run/tether/internal/crashpoint"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/daytona"
	"github.com/tether-run/tether/spool"
)

// What `tether run`, `tether drain` and `tether sweep` open alike.

// OpenJournal opens the journal at cfg.Journal for writing, refusing one
// another tether holds (spool.ErrLocked), and prunes in the background
// what ended longer than cfg.Retention ago until it is closed.
func OpenJournal(cfg config.Config, log *slog.Logger) (*spool.Journal, error) {
	return spool.Open(cfg.Journal, spool.Options{Logger: log.With("component", "journal"), Retention: cfg.Retention, CrashPoint: crashpoint.Hit})
}

// OpenProvider returns the Daytona provider configured from the
// environment, or, as a nil interface (not a typed nil), none and why: each
// problem of the environment, naming the variable to set.
func OpenProvider(log *slog.Logger) (provider.Provider, error) {
	s := daytona.SetupFromEnv(log.With("component", "daytona"))
	if s.Provider == nil {
		return nil, s.Err()
	}
	return s.Provider, nil
}

// NewReaper is the reaper of `tether run` and `tether drain` alike.
func NewReaper(cfg config.Config, j *spool.Journal, prov provider.Provider, log *slog.Logger) *reaper.Reaper {
	return &reaper.Reaper{
		Journal:             j,
		Provider:            prov,
		Logger:              log.With("component", "reaper"),
		AutoStopMinutes:     cfg.DaytonaAutoStop,
		NeverCreatedHorizon: cfg.NeverCreatedHorizon,
		Concurrency:         cfg.DrainConcurrency,
	}
}
