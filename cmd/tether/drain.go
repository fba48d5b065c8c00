package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/config"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/internal/sidecar"
	"github.com/tether-run/tether/journal"
)

// defaultOfflineDrainTimeout is the deadline of `tether drain`: no docker
// stop is waiting, so it can afford longer than the in-container drain.
const defaultOfflineDrainTimeout = 2 * time.Minute

// exitCodeUnresolved is the exit code of `tether drain` (and of `tether
// run --on-unresolved=exit-code`) when intents were left live.
const exitCodeUnresolved = config.UnresolvedExitCode

// drainCommand is `tether drain --journal PATH`: resolve a journal offline,
// e.g. from a host cron after a container died with its journal on a volume.
type drainCommand struct{}

func (*drainCommand) Synopsis() string {
	return "resolve every live intent of a journal now (no child), and report"
}

var drainUsage = `Usage: tether drain [--journal PATH] [--spool DIR] [--drain-timeout D] [--salvage-to NEW] [flags]

Deletes (or stops) every sandbox the journal still holds live, owner-verified
and confirmed gone, with the credentials of the environment (Daytona's, E2B's,
or both: each intent with its own provider's). First
it takes into the journal the files of the spool directory (--spool, the
same default as tether run's), as tether run does: what a runner wrote that
no tether took; a directory that does not exist, or one a live tether run
takes now, is skipped. With
--salvage-to, first copies what is readable of a damaged journal into NEW
(same owner id; the damaged file is only read), then drains NEW.
Intents whose sandbox names have not appeared wait until their
never-created horizon; when only such intents are left and their horizon
falls after the deadline, the drain stops early (after ` + sidecar.DrainNameWaitGrace.String() + `) and says
so. Before any call it checks each provider once: a URL nothing answers at
(connection refused, a host that does not resolve) or a setup error
(credentials, certificates) ends it at once, with nothing done, when no
provider passes; when one of two fails, its intents stay live (exit ` + fmt.Sprint(exitCodeUnresolved) + `).
Exit: 0 when nothing live is left, ` + fmt.Sprint(exitCodeUnresolved) + ` when intents stay live (quarantined
records count as live), ` + fmt.Sprint(exitCodeUsage) + ` for a usage error, a journal that cannot be opened, a
spool directory that cannot be used, or a provider that cannot be reached or
used (nothing done).
`

func (*drainCommand) Run(ctx context.Context, args []string) error {
	cfg := config.Default()
	cfg.DrainTimeout = defaultOfflineDrainTimeout
	fs := newFlags("drain", drainUsage)
	envErr := cfg.Bind(fs, config.Journal, config.SpoolDir, config.Drain, config.Log)
	salvageTo := fs.String("salvage-to", "", "copy what is readable of a damaged --journal into this new journal (same owner id; the damaged file is only read), then drain the new one")
	if err := parseConfig(fs, args, 0, &cfg, envErr); err != nil {
		return helped(err)
	}
	if _, err := os.Stat(cfg.Journal); err != nil {
		// Never create an empty journal where the operator expected one.
		return &exitError{Code: exitCodeUsage, Err: fmt.Errorf("drain: journal %s: %w", cfg.Journal, err)}
	}
	log := newLogger(cfg, os.Stderr)
	// Credentials first: a salvage followed by a drain that cannot run
	// would leave the new file behind for nothing.
	ps := sidecar.OpenProviders(cfg, log)
	if err := ps.Err(); err != nil {
		return &exitError{Code: exitCodeUsage, Err: fmt.Errorf("drain: %w", err)}
	}
	if *salvageTo != "" {
		if err := salvage(cfg.Journal, *salvageTo, os.Stderr); err != nil {
			return &exitError{Code: exitCodeUsage, Err: fmt.Errorf("drain: %w", err)}
		}
		cfg.Journal = *salvageTo
	}
	j, err := sidecar.OpenJournal(cfg, log)
	if err != nil {
		return &exitError{Code: exitCodeUsage, Err: fmt.Errorf("drain: %w", err)}
	}
	defer j.Close()
	if err := sidecar.TakeSpool(ctx, cfg, j, ps, log); err != nil {
		return &exitError{Code: exitCodeUsage, Err: fmt.Errorf("drain: %w", err)}
	}
	rep, err := sidecar.DrainProviders(ctx, cfg, j, ps, log, os.Stderr)
	if err == nil && rep.Total == 0 {
		// The report a drain writes, for a journal with nothing to do:
		// an operator who asked for a drain learns it ran.
		fmt.Fprintf(os.Stderr, "tether: drain: no live intent in %s; nothing to do, 0 left live\n", cfg.Journal)
	}
	// What ended before the retention goes now (the journal's own pruning
	// may not finish in a short drain); the next open compacts the file if
	// that left it mostly free.
	if n, perr := j.Prune(ctx, time.Now().Add(-cfg.Retention), 0); perr != nil {
		log.Warn("journal: pruning ended intents failed", "err", perr)
	} else if n > 0 {
		log.Info("journal: pruned ended intents", "intents", n, "retention", cfg.Retention)
	}
	if err != nil {
		if errors.Is(err, reaper.ErrUnresolved) {
			return &exitError{Code: exitCodeUnresolved}
		}
		if errors.Is(err, reaper.ErrNothingDone) {
			return &exitError{Code: exitCodeUsage, Err: fmt.Errorf("drain: %w", err)}
		}
		return err
	}
	return nil
}

// salvage copies what is readable of the journal at src into a new journal
// at dst, and reports what it could not.
func salvage(src, dst string, w io.Writer) error {
	rep, err := journal.Salvage(src, dst)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "tether: salvage: %s (%d live) copied from %s into %s, owner %s\n", count(rep.Intents, "intent", "intents"), rep.Live, src, dst, rep.Owner)
	if rep.Loose > 0 {
		fmt.Fprintf(w, "tether: salvage: %d of them found only in pages the journal no longer reaches (the newest copy found)\n", rep.Loose)
	}
	for i, d := range rep.Damage {
		if i == maxSalvageLines {
			fmt.Fprintf(w, "tether: salvage: ... and %d more damaged places\n", len(rep.Damage)-i)
			break
		}
		fmt.Fprintf(w, "tether: salvage: damage: %s\n", d)
	}
	if len(rep.Damage) > 0 {
		fmt.Fprintf(w, "tether: salvage: records in the damaged parts are lost and cannot be named; their sandboxes carry the label %s=%s\n", intent.LabelOwner, rep.Owner)
	}
	if n := len(rep.Quarantined); n > 0 {
		fmt.Fprintf(w, "tether: salvage: %s could not be read; %s quarantined in %s and reported by every drain\n", count(n, "record", "records"), pick(n, "it is", "they are"), dst)
	}
	return nil
}

// maxSalvageLines bounds the damage lines of the salvage report; a file
// overwritten wholesale would otherwise print one per page.
const maxSalvageLines = 20
