package sidecar

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/tether-run/tether/internal/config"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/spool"
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
func Drain(ctx context.Context, cfg config.Config, j *spool.Journal, prov provider.Provider, log *slog.Logger, w io.Writer) (reaper.Report, error) {
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
