package sidecar

import (
	"context"
	"log/slog"
	"os"

	"github.com/tether-run/tether/internal/config"
	"github.com/tether-run/tether/internal/crashpoint"
	"github.com/tether-run/tether/internal/dotenv"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/daytona"
)

// What `tether run`, `tether drain` and `tether sweep` open alike.

// OpenJournal opens the journal at cfg.Journal for writing, refusing one
// another tether holds (spool.ErrLocked), and prunes in the background
// what ended longer than cfg.Retention ago until it is closed.
func OpenJournal(cfg config.Config, log *slog.Logger) (*journal.Journal, error) {
	return journal.Open(cfg.Journal, journal.Options{Logger: log.With("component", "journal"), Retention: cfg.Retention, CrashPoint: crashpoint.Hit})
}

// OpenProvider returns the Daytona provider configured as the SDKs
// configure themselves in tether's working directory (DaytonaSettings), or,
// as a nil interface (not a typed nil), none and why: each problem of the
// setup, naming the variable to set.
func OpenProvider(log *slog.Logger) (provider.Provider, error) {
	prov, _, err := openProvider(log, slog.LevelDebug)
	return prov, err
}

// openProvider is OpenProvider with the settings it read, which also
// choose the proxy's upstream; where each came from is said at level.
func openProvider(log *slog.Logger, level slog.Level) (provider.Provider, dotenv.Settings, error) {
	env := DaytonaSettings(log, level)
	s := daytona.SetupFrom(env.Get, log.With("component", "daytona"))
	if s.Provider == nil {
		return nil, env, s.Err()
	}
	return s.Provider, env, nil
}

// daytonaSettings are the variables whose origin is said at start: the
// API URL always (its default is a choice too), the others when set.
var daytonaSettings = []string{daytona.EnvAPIURL, daytona.EnvServerURL, daytona.EnvAPIKey,
	daytona.EnvJWTToken, daytona.EnvOrganizationID, daytona.EnvTarget}

// DaytonaSettings reads Daytona's variables as the TypeScript and Python
// SDKs do: the environment, then .env.local, then .env in the working
// directory, which is the child's too (it inherits tether's). The child's
// DAYTONA_API_URL is tether's proxy, so its SDK never reads the URL from
// these files: tether does, to forward where the runner meant to go, and
// takes its own credentials from them as the runner's SDK would. It says
// where each setting came from at level (never a value), and warns of each
// file it ignores (internal/dotenv: one another user could have written).
func DaytonaSettings(log *slog.Logger, level slog.Level) dotenv.Settings {
	dir, err := os.Getwd()
	if err != nil {
		dir = "."
	}
	env, problems := dotenv.Load(dir, "DAYTONA_")
	for _, p := range problems {
		log.Warn("daytona: a .env file is ignored; the settings in it are not used", "problem", p.Error())
	}
	for _, v := range env.Ambiguous() {
		log.Warn("daytona: the TypeScript and Python SDKs read this value differently (${...} or a backslash); tether reads it as the TypeScript SDK does, literally", "setting", v)
	}
	attrs := []any{"dir", dir}
	for _, name := range daytonaSettings {
		if origin := env.Origin(name); origin != dotenv.FromDefault || name == daytona.EnvAPIURL {
			attrs = append(attrs, name, origin)
		}
	}
	log.Log(context.Background(), level, "daytona: where each setting came from (env, then .env.local, then .env in dir, as the SDKs read them; default: set nowhere)", attrs...)
	return env
}

// NewReaper is the reaper of `tether run` and `tether drain` alike.
func NewReaper(cfg config.Config, j *journal.Journal, prov provider.Provider, log *slog.Logger) *reaper.Reaper {
	return &reaper.Reaper{
		Journal:             j,
		Provider:            prov,
		Logger:              log.With("component", "reaper"),
		AutoStopMinutes:     cfg.DaytonaAutoStop,
		NeverCreatedHorizon: cfg.NeverCreatedHorizon,
		Concurrency:         cfg.DrainConcurrency,
	}
}
