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
	"github.com/tether-run/tether/internal/providers"
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
func TakeSpool(ctx context.Context, cfg config.Config, j *journal.Journal, opened providers.Opened, log *slog.Logger) error {
	log = log.With("component", "spool")
	if _, err := os.Stat(cfg.Spool); errors.Is(err, os.ErrNotExist) {
		log.Info("spool: no spool directory; the journal alone is drained", "dir", cfg.Spool)
		return nil
	}
	in := newIntake(cfg, j, opened.Set(), opened)
	in.Logger = log
	t, err := (&spooldir.Reader{Intake: in, Dir: cfg.Spool}).Pass(ctx)
	if errors.Is(err, spooldir.ErrBusy) {
		// A live tether run takes them: they are its runner's.
		log.Warn("spool: a tether takes this spool directory's files now; they are left to it, and the journal alone is drained", "dir", cfg.Spool)
		return nil
	}
	if err != nil {
		return withPathSetting(err, "--spool", config.EnvSpool)
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

// DrainProviders is `tether drain`: it resolves every live intent of j,
// each with the provider it names, under the drain deadline, writing the
// report to w, and beside it each provider's guard finishes the durable
// work a run left (hand-backs of kept sandboxes). Each provider is checked
// first, when there is something to drain: one that fails (a URL nothing
// answers at, a setup error) is left out, its intents staying live and
// reported, and when every one fails the drain ends at once
// (reaper.ErrNothingDone) instead of every intent retrying it until the
// deadline. It returns reaper.ErrUnresolved (wrapped) when intents were
// left live.
func DrainProviders(ctx context.Context, cfg config.Config, j *journal.Journal, opened providers.Opened, log *slog.Logger, w io.Writer) (reaper.Report, error) {
	set := opened.Set()
	if n, err := j.LiveCount(); err == nil && n > 0 && set.Len() > 0 {
		var ok []provider.Provider
		var errs []error
		for _, p := range set.All() {
			cctx, cancel := context.WithTimeout(ctx, cfg.CheckTimeout)
			err := reaper.Precheck(cctx, p)
			cancel()
			if err != nil {
				log.Error("drain: "+p.Name()+" cannot be used; its intents stay live", "err", err)
				errs = append(errs, err)
				continue
			}
			ok = append(ok, p)
		}
		if len(ok) == 0 {
			return reaper.Report{}, fmt.Errorf("%d live intents stay in the journal: %w", n, errors.Join(errs...))
		}
		set = provider.NewSet(ok...)
	}
	dctx, cancel := drainDeadline(ctx, cfg.DrainTimeout)
	defer cancel()
	r := NewReaper(cfg, j, set, log)
	r.NameWaitGrace = DrainNameWaitGrace
	var beside []<-chan struct{}
	for i, k := range opened.Kinds {
		p, has := set.Named(k.Name)
		if k.Guard == nil || !has {
			continue
		}
		g, err := k.Guard(providers.Wiring{Config: cfg, Provider: p, Setup: opened.Setups[i], Journal: j, Reaper: r, Logger: log})
		if err != nil {
			return reaper.Report{}, fmt.Errorf("%s: %w", k.Name, err)
		}
		defer g.Close()
		beside = append(beside, g.BesideDrain(dctx))
	}
	defer func() {
		for _, done := range beside {
			<-done
		}
	}()
	return r.DrainLive(dctx, j, w)
}
