package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/tether-run/tether/internal/config"
	"github.com/tether-run/tether/internal/intake/spooldir"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider"
)

// drainDeadline is the one place the drain's deadline is made, for `tether
// run` (from the moment the child is gone) and `tether drain` alike:
// --drain-timeout from now. Everything the drain does runs under the
// context it returns — the wait for the intakes to settle, the ending of
// kept sandboxes' leases and the reaper's DrainLive — so none of them can
// outlast it, and `--grace + --drain-timeout` is the bound a docker stop is
// promised.
func drainDeadline(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, timeout)
}

// DrainNameWaitGrace: `tether drain` stops before its deadline once every
// intent it has left waits for a sandbox name that, absent, closes as
// never-created only after the deadline, and it has run this long (time for
// a create sent just before the runner died to land). tether run's drain
// does not: its runner may have sent a create a moment ago.
const DrainNameWaitGrace = 10 * time.Second

// Drain is `tether drain`: it resolves every live intent of j with prov
// under the drain deadline, writing the report to w, and beside it hands
// back the sandboxes released as kept under a lease that a run left
// pending. It returns reaper.ErrUnresolved (wrapped) when intents were left
// live. Before any of that, when there is something to drain, the
// provider's check: a URL nothing answers at or a setup error ends it at
// once (reaper.ErrNothingDone), instead of every intent retrying it until
// the deadline.
func Drain(ctx context.Context, cfg config.Config, j *journal.Journal, prov provider.Provider, log *slog.Logger, w io.Writer) (reaper.Report, error) {
	if n, err := j.LiveCount(); err == nil && n > 0 && prov != nil {
		cctx, cancel := context.WithTimeout(ctx, cfg.CheckTimeout)
		err := reaper.Precheck(cctx, prov)
		cancel()
		if err != nil {
			return reaper.Report{}, fmt.Errorf("%d live intents stay in the journal: %w", n, err)
		}
	}
	dctx, cancel := drainDeadline(ctx, cfg.DrainTimeout)
	defer cancel()
	r := NewReaper(cfg, j, prov, log)
	r.NameWaitGrace = DrainNameWaitGrace
	keep := newPolicy(cfg, r, j, log)
	defer keep.Close()
	kept := keep.EndKept(dctx)
	defer func() { <-kept }()
	return r.DrainLive(dctx, j, w)
}

// TakeSpool is what `tether drain` does first: it takes the files in the
// spool directory (cfg.Spool) into j once, as `tether run`'s spool intake
// does (the same access rules; a refused file goes to rejected/ with its
// reason). They are what a runner wrote that no tether took: it died
// first, or the runner outlived it. Drained on the journal alone, the
// sandbox such a file declares would not be found, and an intent whose
// runner deleted its sandbox and released it in such a file would close
// as never-created, a sandbox that existed. A spool directory that does not
// exist is said and skipped; one that cannot be used is an error, and
// nothing was taken from it. A delete op is left to the drain.
func TakeSpool(ctx context.Context, cfg config.Config, j *journal.Journal, ps Providers, log *slog.Logger) error {
	log = log.With("component", "spool")
	if _, err := os.Stat(cfg.Spool); errors.Is(err, os.ErrNotExist) {
		log.Info("spool: no spool directory; the journal alone is drained", "dir", cfg.Spool)
		return nil
	}
	in := newIntake(cfg, j, ps)
	in.Logger = log
	t, err := (&spooldir.Reader{Intake: in, Dir: cfg.Spool}).Pass(ctx)
	if errors.Is(err, spooldir.ErrBusy) {
		// A live tether run takes them: they are its runner's.
		log.Warn("spool: a tether takes this spool directory's files now; they are left to it, and the journal alone is drained", "dir", cfg.Spool)
		return nil
	}
	if err != nil {
		return withSetting(err, "--spool", config.EnvSpool)
	}
	args := []any{"dir", cfg.Spool, "taken", t.Taken, "rejected", t.Rejected, "left", t.Left}
	switch {
	case t.Rejected > 0:
		log.Warn("spool: took the files left there; rejected ones are in "+filepath.Join(cfg.Spool, spooldir.RejectedDir)+" with their reasons", args...)
	case t.Left > 0:
		log.Warn("spool: took the files left there; some stay for the next tether run or drain", args...)
	default:
		log.Info("spool: took the files left there", args...)
	}
	return nil
}
