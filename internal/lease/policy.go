package lease

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/tether-run/tether/spool"
)

// ErrNotOurs is what Reaper.ApplyLease wraps when the sandbox is not ours
// or is gone: nothing to fall back to, only a warning.
var ErrNotOurs = errors.New("the sandbox is not ours or is gone")

// Reaper is what the policy asks of the reaper (internal/reaper's, through
// the sidecar): put a sandbox under its lease, hand it back, or fall back
// to the long auto-stop backstop.
type Reaper interface {
	ApplyLease(ctx context.Context, in spool.Intent) error
	EndLease(ctx context.Context, in spool.Intent, autoStop int) error
	Backstop(ctx context.Context, in spool.Intent) error
}

// Policy is lease mode as tether run applies it beside the Renewer: a newly
// observed sandbox gets the short auto-stop of its lease, and a sandbox the
// runner releases as kept gets its lease ended, once, so that it outlives
// tether as the runner asked.
type Policy struct {
	Reaper Reaper
	// Journal is read once the child is gone, for sandboxes released as
	// kept that the renewer had no time to see.
	Journal interface {
		All() ([]spool.Intent, error)
	}
	// AutoStop is the auto-stop (minutes) a kept sandbox gets back
	// (--daytona-auto-stop).
	AutoStop int
	// CallTimeout bounds each lease call made outside the drain; Settle is
	// added to it for ApplyLease, which waits that long for a renewal to
	// reach the provider's check.
	CallTimeout time.Duration
	Settle      time.Duration
	Logger      *slog.Logger

	// kept: the intents whose lease End ended (or is ending), so a kept
	// sandbox is handed back once; since is when Start was called.
	mu    sync.Mutex
	kept  map[string]bool
	since time.Time
}

// Start marks when lease mode began: End after the child is gone looks
// only at sandboxes released from then on.
func (p *Policy) Start() {
	p.mu.Lock()
	p.since = time.Now()
	p.mu.Unlock()
}

func (p *Policy) log() *slog.Logger {
	if p.Logger == nil {
		return slog.Default()
	}
	return p.Logger
}

// Apply puts a newly observed sandbox under lease mode (the backstop of
// lease mode: a short auto-stop rather than a long one), under
// CallTimeout plus Settle.
func (p *Policy) Apply(in spool.Intent) {
	log := p.log()
	ctx, cancel := context.WithTimeout(context.Background(), p.CallTimeout+p.Settle)
	defer cancel()
	err := p.Reaper.ApplyLease(ctx, in)
	if err == nil || errors.Is(err, ErrNotOurs) {
		if err != nil {
			log.Warn("lease not applied", "intent", in.ID, "name", in.Name, "sandbox", in.SandboxID, "err", err)
		}
		return
	}
	log.Error("lease not applied: this sandbox keeps its own auto-stop and would outlive a lost tether by that long; trying the auto-stop backstop", "intent", in.ID, "name", in.Name, "sandbox", in.SandboxID, "err", err)
	bctx, cancel := context.WithTimeout(context.Background(), p.CallTimeout)
	defer cancel()
	if err := p.Reaper.Backstop(bctx, in); err != nil {
		log.Warn("auto-stop backstop not applied", "intent", in.ID, "name", in.Name, "sandbox", in.SandboxID, "err", err)
	}
}

// Kept is the Renewer's Kept: it ends the lease of a sandbox the runner
// released as kept, under CallTimeout.
func (p *Policy) Kept(in spool.Intent) {
	ctx, cancel := context.WithTimeout(context.Background(), p.CallTimeout)
	defer cancel()
	p.End(ctx, in)
}

// End hands a sandbox the runner released as kept back to it: the
// backstop's auto-stop, auto-delete never (the reaper's EndLease). A
// sandbox is handed back once, however often it is seen.
func (p *Policy) End(ctx context.Context, in spool.Intent) {
	p.mu.Lock()
	if p.kept == nil {
		p.kept = map[string]bool{}
	}
	if p.kept[in.ID] {
		p.mu.Unlock()
		return
	}
	p.kept[in.ID] = true
	p.mu.Unlock()
	if err := p.Reaper.EndLease(ctx, in, p.AutoStop); err != nil {
		p.log().Error("lease not ended on a sandbox the runner keeps: Daytona will stop it (and delete it if auto-delete is 0) within the lease", "intent", in.ID, "sandbox", in.SandboxID, "err", err)
	}
}

// EndKept, once the child is gone, ends (beside the drain, under ctx: the
// drain's deadline) the leases of the sandboxes released as kept since
// Start that the renewer had no time to see: a runner that releases and
// exits at once. The returned channel is closed when it is done.
func (p *Policy) EndKept(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	all, err := p.Journal.All()
	if err != nil {
		p.log().Warn("lease: cannot read the journal for sandboxes released as kept", "err", err)
		close(done)
		return done
	}
	p.mu.Lock()
	since := p.since
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, in := range all {
		if in.State != spool.Released || in.Outcome != spool.OutcomeKept || in.SandboxID == "" || in.UpdatedAt.Before(since) {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); p.End(ctx, in) }()
	}
	go func() { wg.Wait(); close(done) }()
	return done
}
