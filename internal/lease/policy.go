package lease

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/provider"
)

// ErrNotOurs is what Reaper.ApplyLease wraps when the sandbox is not ours
// or is gone: nothing to fall back to, only a warning.
var ErrNotOurs = errors.New("the sandbox is not ours or is gone")

// Reaper is what the policy asks of the reaper (internal/reaper's, through
// the sidecar): put a sandbox under its lease, hand it back, or fall back
// to the long auto-stop backstop.
type Reaper interface {
	ApplyLease(ctx context.Context, in intent.Intent) error
	EndLease(ctx context.Context, in intent.Intent, autoStop int) error
	// MarkKept marks a sandbox released as kept outside lease mode so
	// that no sweep deletes it (the keep label), changing nothing else.
	MarkKept(ctx context.Context, in intent.Intent) error
	Backstop(ctx context.Context, in intent.Intent) error
}

// Policy is lease mode as tether run applies it beside the Renewer: a newly
// observed sandbox gets the short auto-stop of its lease, and a sandbox the
// runner releases as kept is handed back, durably: it keeps lease mode's
// short intervals until Daytona confirms the hand-back, so the hand-back is
// journaled work (intent.Intent.HandBackPending, from the release on), tried
// with backoff until it is confirmed, across drains and restarts: from
// Resume at start, Kept when the renewer sees the release, Watch while the
// runner lives, EndKept beside the drain (and `tether drain`). Outside
// lease mode a sandbox released as kept is handed back the same way, its
// hand-back only the keep label (Reaper.MarkKept): every sandbox tether
// hands back is marked so that no sweep deletes it.
type Policy struct {
	Reaper Reaper
	// Provider, when set, is the provider whose hand-backs this policy
	// does (intent.Intent.ProviderName); the journal's pending hand-backs
	// of another are another's.
	Provider string
	// Journal is where pending hand-backs are found and marked done.
	// PendingHandBacks reads only them (the journal's index of them), never the
	// journal's history: a start and a drain beside 100,000 finished
	// intents cost what the few pending ones do.
	Journal interface {
		PendingHandBacks() ([]intent.Intent, error)
		MarkHandedBack(id string) (intent.Intent, error)
	}
	// AutoStop is the auto-stop (minutes) a kept sandbox gets back
	// (--daytona-auto-stop).
	AutoStop int
	// CallTimeout bounds ApplyLease and the backstop; Settle is added to
	// it for ApplyLease, which waits that long for a renewal to reach the
	// provider's check.
	CallTimeout time.Duration
	Settle      time.Duration
	// RetryBase and RetryMax space the tries of a hand-back the reaper
	// gave up on for now (a refused configuration; it retries transient
	// failures itself): doubling from RetryBase up to RetryMax
	// (defaults DefaultHandBackRetryBase, DefaultHandBackRetryMax).
	RetryBase, RetryMax time.Duration
	Logger              *slog.Logger

	mu      sync.Mutex
	started bool
	life    context.Context // ends at Close: every hand-back runs under it
	stop    context.CancelFunc
	wg      sync.WaitGroup
	active  map[string]chan struct{} // hand-backs under way, closed when each ends
}

// Defaults of the hand-back's own retries.
const (
	DefaultHandBackRetryBase = time.Second
	DefaultHandBackRetryMax  = time.Minute
	// DefaultKeepWatch is how often Watch reads the journal's index of
	// pending hand-backs while the runner lives: a sandbox released as
	// kept is marked within about this.
	DefaultKeepWatch = 5 * time.Second
)

func (p *Policy) log() *slog.Logger {
	if p.Logger == nil {
		return slog.Default()
	}
	return p.Logger
}

// Apply puts a newly observed sandbox under lease mode (the backstop of
// lease mode: a short auto-stop rather than a long one), under
// CallTimeout plus Settle.
func (p *Policy) Apply(in intent.Intent) {
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

// Resume starts the hand-back of every sandbox the journal says is still
// to be handed back (a run, or a drain, that ended before Daytona
// confirmed it). It does not wait.
func (p *Policy) Resume() {
	pending, err := p.pending()
	if err != nil {
		p.log().Warn("lease: cannot read the journal for sandboxes to hand back; tried again at the drain", "err", err)
		return
	}
	for _, in := range pending {
		p.handBack(in)
	}
	if len(pending) > 0 {
		p.log().Info("lease: handing back sandboxes released as kept that an earlier run did not finish", "sandboxes", len(pending))
	}
}

// pending is the journal's pending hand-backs of this policy's provider.
func (p *Policy) pending() ([]intent.Intent, error) {
	all, err := p.Journal.PendingHandBacks()
	if p.Provider == "" {
		return all, err
	}
	out := all[:0]
	for _, in := range all {
		if in.ProviderName() == p.Provider {
			out = append(out, in)
		}
	}
	return out, err
}

// Watch starts, every interval (DefaultKeepWatch if zero) until ctx ends,
// the hand-back of each sandbox released as kept since (the journal's index
// of pending hand-backs: its cost is what is pending, not the history), so
// that one the runner keeps is marked while the runner lives, not only at
// the drain. It returns when ctx ends.
func (p *Policy) Watch(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(orDefault(interval, DefaultKeepWatch))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pending, err := p.pending()
		if err != nil {
			p.log().Debug("lease: cannot read the journal for sandboxes to hand back; tried again", "err", err)
			continue
		}
		for _, in := range pending {
			p.handBack(in)
		}
	}
}

// Kept is the Renewer's Kept: it starts the hand-back of a sandbox the
// runner released as kept. It does not wait. The renewer renewed it, so it
// is under a lease even if its intent does not say so (declared by a
// tether that did not journal leases yet).
func (p *Policy) Kept(in intent.Intent) {
	if in.State == intent.Released && in.Outcome == intent.OutcomeKept && in.SandboxID != "" && !in.HandedBack {
		in.Lease = max(in.Lease, 1) // renewed: its lease is what the hand-back ends
		p.handBack(in)
	}
}

// handBack starts the hand-back of in, unless one is under way already,
// and returns the channel closed when it ends.
func (p *Policy) handBack(in intent.Intent) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.started {
		p.started = true
		p.life, p.stop = context.WithCancel(context.Background())
		p.active = map[string]chan struct{}{}
	}
	if done, ok := p.active[in.ID]; ok {
		return done
	}
	done := make(chan struct{})
	p.active[in.ID] = done
	if p.life.Err() != nil {
		close(done)
		return done
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(done)
		p.handBackUntilConfirmed(p.life, in)
	}()
	return done
}

// handBackUntilConfirmed ends the lease of a sandbox released as kept
// (the reaper's EndLease: the backstop's auto-stop, auto-delete never, the
// keep label), tries again with backoff until Daytona confirms it or ctx
// ends, and journals it done. What ctx cut short stays pending in the
// journal for the next run or `tether drain`.
func (p *Policy) handBackUntilConfirmed(ctx context.Context, in intent.Intent) {
	log := p.log().With("intent", in.ID, "sandbox", in.SandboxID)
	base, max := orDefault(p.RetryBase, DefaultHandBackRetryBase), orDefault(p.RetryMax, DefaultHandBackRetryMax)
	wait := base
	for attempt := 0; ; attempt++ {
		var err error
		if in.Lease > 0 {
			err = p.Reaper.EndLease(ctx, in, p.AutoStop)
		} else {
			err = p.Reaper.MarkKept(ctx, in)
		}
		switch {
		case err == nil && in.Lease > 0:
			log.Info("lease: sandbox handed back to its runner", "auto_stop_minutes", p.AutoStop)
		case err == nil:
		case errors.Is(err, ErrNotOurs):
			log.Warn("lease: a sandbox released as kept is gone or not ours; nothing to hand back", "err", err)
		case ctx.Err() != nil && in.Lease > 0:
			log.Error("lease: a sandbox released as kept is not handed back yet: Daytona will stop it within the lease (and delete it within another) unless tether tries again in time: at its next start, or `tether drain`, with this journal", "err", err)
			return
		case ctx.Err() != nil:
			log.Error("a sandbox released as kept is not labelled "+provider.LabelKeep+" yet: a tether sweep may delete it once it is old and idle; tether tries again at its next start, or `tether drain`, with this journal", "err", err)
			return
		default:
			if attempt == 0 {
				log.Error("the hand-back of a sandbox released as kept failed; trying again until the provider confirms it", "err", err)
			}
			if !sleep(ctx, wait) {
				continue // the next try returns at once and says so
			}
			wait = min(2*wait, max)
			continue
		}
		if _, err := p.Journal.MarkHandedBack(in.ID); err != nil {
			log.Warn("lease: the hand-back is done but not journaled; it is checked again at the next start", "err", err)
		}
		return
	}
}

// EndKept, once the child is gone, waits under ctx (the drain's deadline)
// for the hand-back of every sandbox released as kept that is not
// confirmed yet, starting those not under way (a runner that released
// and exited before the renewer saw it). The returned channel is closed
// when they are all done or ctx ends; those left stay pending in the
// journal.
func (p *Policy) EndKept(ctx context.Context) <-chan struct{} {
	pending, err := p.pending()
	out := make(chan struct{})
	if err != nil {
		p.log().Warn("lease: cannot read the journal for sandboxes released as kept", "err", err)
		close(out)
		return out
	}
	var waits []<-chan struct{}
	for _, in := range pending {
		waits = append(waits, p.handBack(in))
	}
	go func() {
		defer close(out)
		left := 0
		for _, done := range waits {
			select {
			case <-done:
			case <-ctx.Done():
				left++
			}
		}
		if left > 0 {
			p.log().Error("lease: sandboxes released as kept are not handed back by the drain's deadline; they stay pending in the journal for the next start or `tether drain`", "sandboxes", left)
		}
	}()
	return out
}

// Close stops every hand-back under way and waits for it; what is not
// confirmed stays pending in the journal.
func (p *Policy) Close() {
	p.mu.Lock()
	if !p.started {
		p.started = true
		p.life, p.stop = context.WithCancel(context.Background())
		p.active = map[string]chan struct{}{}
	}
	p.stop()
	p.mu.Unlock()
	p.wg.Wait()
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
