// Package reaper resolves sandbox intents against their providers: it finds
// the sandbox an intent stands for with the provider the intent names
// (Reaper.Providers, by its name), proves it is ours (id, name, every
// ownership label, account), journals what it learned before any
// destructive call, deletes or stops it, and confirms the result. Drain
// resolves many intents in parallel under one deadline and reports what is
// left, by provider; Replay is the drain at boot, Sweep judges an account's
// stale sandboxes with no journal, and the backstop and the lease act on a
// newly observed sandbox.
//
// The reaper is conservative in one direction only: it would rather leave a
// sandbox live (and say so) than delete one it cannot prove is its own, or
// call an intent gone on the strength of a 404 for a name it never observed.
package reaper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/crashpoint"
	"github.com/tether-run/tether/provider"
)

// Journal is the part of spool.Journal the reaper uses. Every write is
// fsynced before it returns, which is what lets the reaper journal an id or
// a releasing state before the provider call it protects. Which intents to
// resolve is the caller's choice (Drain takes them as an argument).
type Journal interface {
	Get(id string) (intent.Intent, error)
	Live() ([]intent.Intent, error)
	Observe(id, sandboxID string) (intent.Intent, error)
	ReplaceObserved(id, wrongID, foundID string) (intent.Intent, error)
	Transition(id string, to intent.State, lastErr string) (intent.Intent, error)
	Note(id string, lastErr string) (intent.Intent, error)
}

// Defaults of the Reaper's settings, used when a field is zero.
const (
	// DefaultConcurrency: provider calls in flight at once, across every
	// intent this Reaper works on. On the healthy path an intent costs two
	// calls (delete, confirm) when the backstop verified its id, three when
	// it is found by name (look up, delete, confirm), so a drain takes about
	// calls x latency / concurrency: 64 drains 1,000 sandboxes at 50 ms per
	// call in about 2 s.
	DefaultConcurrency = 64
	// IntentsPerCall is how many intents Drain keeps open per call slot.
	// Open intents wait for a slot at the gate, deletes first, so a drain
	// with this many open sends every delete it can before it confirms:
	// a delete that must wait out a 429 is then retried while the
	// confirmations of the others go on, instead of starting last. Each
	// open intent is a goroutine: 16 x 64 = 1,024 at the default
	// concurrency, so a drain of 1,000 has them all open at once while a
	// journal of 10,000 does not cost 10,000 goroutine stacks.
	IntentsPerCall = 16
	// DefaultRetryBase is the first wait after a failed provider call
	// (409, 429 without Retry-After, 5xx, timeout); it doubles per failure.
	DefaultRetryBase = 100 * time.Millisecond
	// DefaultRetryMax caps the wait between retries of a failing call.
	DefaultRetryMax = 2 * time.Second
	// DefaultJitter is the fraction of each wait drawn at random, so that
	// many intents failing together (a 429 burst) do not retry in lockstep.
	DefaultJitter = 0.3
	// DefaultPollInterval is the first wait while the provider is working:
	// a sandbox destroying or stopping, or a name that has not appeared yet.
	DefaultPollInterval = 100 * time.Millisecond
	// DefaultPollMax caps the wait between polls of a sandbox being
	// deleted or stopped.
	DefaultPollMax = 1 * time.Second
	// DefaultLookupPollMax caps the wait between lookups of a name that has
	// not appeared. Such an intent may wait for a long time (a boot replay
	// polls it until the never-created horizon), so it polls more slowly
	// than a deletion, to spare the provider's rate limit.
	DefaultLookupPollMax = 5 * time.Second
	// DefaultCallTimeout bounds one provider call, so a hung request is
	// retried within the drain instead of holding the intent until the
	// deadline. Providers have their own per-call timeout too.
	DefaultCallTimeout = 3 * time.Second
	// DefaultProgressInterval is how often a running drain logs its progress.
	DefaultProgressInterval = time.Second
	// DefaultNeverCreatedHorizon: a never-observed name still absent this long
	// after its intent was declared closes as never-created (config's default).
	DefaultNeverCreatedHorizon = 30 * time.Minute
	// DefaultConfirmDelay is how long after an accepted delete the first
	// read that confirms it is sent: about the time Daytona takes to destroy
	// a sandbox (its destroy action runs after the answer, then the runner
	// removes the container), so that on the healthy path one read finds
	// the 404. Polls follow at PollInterval, doubling up to PollMax.
	DefaultConfirmDelay = 1 * time.Second
	// DefaultRecheckDelay is the pause before a second read of an observed
	// id that answered 404 while no delete of ours was known to be accepted:
	// Daytona's access guard answers 404 for any error it meets (a database
	// or cache hiccup), so one 404 alone does not close an intent as gone.
	DefaultRecheckDelay = 250 * time.Millisecond
	// DefaultMinConcurrency is the floor the drain's concurrency falls to
	// under sustained 429s.
	DefaultMinConcurrency = 4
	// DefaultThrottledShare: when at least this share of the calls
	// completed in one round (as many calls as the current concurrency) were
	// answered 429, the concurrency halves; a round with no 429 adds one
	// back, up to Concurrency (AIMD). Random 429s on a few percent of calls
	// do not lower it; a spent quota, which refuses everything, does.
	DefaultThrottledShare = 0.25
	// maxVerified bounds how many verified sandbox ids the reaper remembers
	// (one per live intent is what it needs); past it the memory is dropped
	// and the drain reads before it deletes, as it would after a restart.
	maxVerified = 100_000
)

// stateStopping is the provider's word for a stop in progress; the reaper
// waits it out instead of asking again.
const stateStopping = "stopping"

// destroyedPrefix is how Daytona renames a sandbox the moment its deletion
// starts (DESTROYED_<name>_<unix ms>): a sandbox in that state still counts
// as the intent's by name.
const destroyedPrefix = "DESTROYED_"

// Errors Resolve returns (wrapped) to say why an intent is still live or why
// it was closed.
var (
	// ErrNotCreated: the intent's name does not exist (yet). The create may
	// still land, so the intent stays live; it is never taken as gone.
	ErrNotCreated = errors.New("sandbox name not found; the create may still land")
	// ErrInProgress: the provider is deleting or stopping the sandbox and
	// has not finished yet.
	ErrInProgress = errors.New("deletion not yet confirmed")
	// ErrForeign: the sandbox under the intent's id or name is not ours.
	ErrForeign = errors.New("sandbox is not ours")
	// ErrWrongAccount: the intent was declared under other provider
	// credentials. Nothing is called; the intent waits for the right ones.
	ErrWrongAccount = errors.New("intent belongs to another provider account")
	// ErrNoProvider: the intent names a provider this reaper does not have.
	ErrNoProvider = errors.New("no provider for intent")
	// ErrJournal: the journal refused a write; the reaper never makes a
	// destructive call it could not journal first.
	ErrJournal = errors.New("journal")
)

// Reaper resolves intents. The zero value of each setting means its default.
// A Reaper is safe for concurrent use; concurrent Resolve calls on the same
// intent are serialised.
type Reaper struct {
	Journal Journal
	// Providers serve each intent by the provider it names
	// (intent.ProviderName: Daytona when it names none), so one drain
	// resolves a runner's sandboxes on every provider it uses. Intents of
	// a provider the Set lacks stay live (ErrNoProvider). The call gate is
	// shared: one concurrency bound for the drain, whichever provider each
	// call goes to.
	Providers provider.Set
	Logger    *slog.Logger

	// AutoStopMinutes is the Daytona auto-stop interval Backstop sets on a
	// sandbox that has it disabled (0). Zero here turns the backstop off.
	AutoStopMinutes int
	// NeverCreatedHorizon: default DefaultNeverCreatedHorizon.
	NeverCreatedHorizon time.Duration
	// NameWaitGrace, when positive, lets a drain (not a replay) stop before
	// its deadline once every intent it has left waits for a name that,
	// absent, closes as never-created only after that deadline, and the
	// drain has run this long: time for a create sent just before the
	// runner died to land. Zero: a drain runs to its deadline (tether run's,
	// whose runner may have sent a create a moment ago).
	NameWaitGrace time.Duration
	// Concurrency bounds the provider calls in flight at once (default
	// DefaultConcurrency). It is read once, at the first call.
	Concurrency int

	RetryBase        time.Duration // default DefaultRetryBase
	RetryMax         time.Duration // default DefaultRetryMax
	Jitter           float64       // default DefaultJitter; negative means none
	PollInterval     time.Duration // default DefaultPollInterval
	PollMax          time.Duration // default DefaultPollMax
	LookupPollMax    time.Duration // default DefaultLookupPollMax
	CallTimeout      time.Duration // default DefaultCallTimeout
	ProgressInterval time.Duration // default DefaultProgressInterval
	ConfirmDelay     time.Duration // default DefaultConfirmDelay
	RecheckDelay     time.Duration // default DefaultRecheckDelay
	// MinConcurrency and ThrottledShare steer the adaptive concurrency
	// (defaults DefaultMinConcurrency, DefaultThrottledShare). Read once.
	MinConcurrency int
	ThrottledShare float64
	ReportLines    int // default DefaultReportLines; negative lists none

	// Now is the clock for the never-created horizon; default time.Now.
	Now func() time.Time

	mu    sync.Mutex
	locks map[string]chan struct{}
	gate  *gate
	// verified maps an intent id to the sandbox id a read proved ours (the
	// backstop's read at observe time, or a drain's). Ids are never reused,
	// so that sandbox stays ours: its delete needs no second read.
	verified map[string]string
}

func (r *Reaper) callGate() *gate {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gate == nil {
		max := orDefault(r.Concurrency, DefaultConcurrency)
		r.gate = newGate(max, min(max, orDefault(r.MinConcurrency, DefaultMinConcurrency)), orDefault(r.ThrottledShare, DefaultThrottledShare))
	}
	return r.gate
}

// CurrentConcurrency is the provider calls the reaper lets in flight now:
// the configured Concurrency, lowered under sustained 429s.
func (r *Reaper) CurrentConcurrency() int { return r.callGate().current() }

// remember records that a read proved sandboxID to be in's sandbox.
func (r *Reaper) remember(in intent.Intent, sandboxID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.verified == nil || len(r.verified) >= maxVerified {
		r.verified = make(map[string]string)
	}
	r.verified[in.ID] = sandboxID
}

func (r *Reaper) forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.verified, id)
}

// isVerified reports whether in's observed sandbox was proved ours by a read.
func (r *Reaper) isVerified(in intent.Intent) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return in.SandboxID != "" && r.verified[in.ID] == in.SandboxID
}

// Call priorities at the gate. What stops the billing goes first: the
// delete (or stop) of a sandbox already verified, then the read that
// verifies the next one, then the reads that only confirm a deletion. A
// drain cut short by its deadline has then sent as many deletes as it
// could; what it could not confirm, the next boot confirms by the id's 404.
const (
	prioConfirm = iota
	prioRead
	prioDestroy
)

func orDefault[T int | time.Duration | float64](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

func (r *Reaper) log() *slog.Logger {
	if r.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return r.Logger
}

func (r *Reaper) now() time.Time {
	if r.Now == nil {
		return time.Now()
	}
	return r.Now()
}

// lock serialises work on one intent, so the socket API's delete and a drain
// racing on the same intent do not issue the same calls twice.
func (r *Reaper) lock(ctx context.Context, id string) (unlock func(), err error) {
	for {
		r.mu.Lock()
		if r.locks == nil {
			r.locks = make(map[string]chan struct{})
		}
		held, busy := r.locks[id]
		if !busy {
			ch := make(chan struct{})
			r.locks[id] = ch
			r.mu.Unlock()
			return func() {
				r.mu.Lock()
				delete(r.locks, id)
				r.mu.Unlock()
				close(ch)
			}, nil
		}
		r.mu.Unlock()
		select {
		case <-held:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for another resolve of the same intent: %w", ctx.Err())
		}
	}
}

// providerFor is the provider in was declared with (its name), if it
// holds in's account (checkAccount): the only one that may act on in's
// sandbox.
func (r *Reaper) providerFor(in intent.Intent) (provider.Provider, error) {
	p, err := r.providerNamed(in)
	if err != nil {
		return nil, err
	}
	if err := checkAccount(p, in); err != nil {
		return nil, err
	}
	return p, nil
}

func (r *Reaper) providerNamed(in intent.Intent) (provider.Provider, error) {
	if p, ok := r.Providers.Named(in.ProviderName()); ok {
		return p, nil
	}
	return nil, fmt.Errorf("%w %q (tether has %s)", ErrNoProvider, in.ProviderName(), r.Providers.Names())
}

// checkAccount says why p may not act on in: an intent declared under
// other credentials (ErrWrongAccount), or one without an account for a
// provider whose 404 cannot tell a gone sandbox from another account's.
func checkAccount(p provider.Provider, in intent.Intent) error {
	if in.Account == "" {
		if provider.NeedsAccount(p) {
			return fmt.Errorf("%w: declared without an account, and %s answers 404 for another account's sandbox too", ErrWrongAccount, p.Name())
		}
		return nil
	}
	if in.Account != p.Account() {
		// Not foreign: the sandbox may well be ours, reachable with the
		// credentials it was created under.
		return fmt.Errorf("%w: declared under %s, current credentials are %s", ErrWrongAccount, in.Account, p.Account())
	}
	return nil
}

// call runs one provider call of a kind (provider.Call*) under
// CallTimeout. A call that ran out of its own time while the caller's
// context is still alive is a hung request: reported as ErrUnavailable, so
// it is retried. When the provider knows the quota this kind of call counts
// against is spent (its last answer said so), the call waits for the
// quota's reset first rather than be refused.
func (r *Reaper) call(ctx context.Context, p provider.Provider, prio int, kind, what string, f func(context.Context) error) error {
	g := r.callGate()
	for {
		if err := g.acquire(ctx, prio); err != nil {
			return fmt.Errorf("%s: waiting for a call slot: %w", what, err)
		}
		// Checked with the slot in hand, right before sending: the answers
		// of the calls that held the slots meanwhile may have spent it.
		t, ok := p.(provider.Throttled)
		if !ok {
			break
		}
		wait := time.Until(t.ExhaustedUntil(kind))
		if wait <= 0 {
			break
		}
		g.cancel()
		if !sleep(ctx, wait) {
			return fmt.Errorf("%s: %w", what, &provider.RateLimitError{RetryAfter: wait, Limiter: "the provider's quota for " + kind + " calls, spent"})
		}
	}
	// A provider's own bound for this kind of call, when longer (a Docker
	// force-remove under load), spares it being cut and sent again.
	timeout := max(orDefault(r.CallTimeout, DefaultCallTimeout), provider.CallTimeout(p, kind))
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := f(cctx)
	if lowered := g.release(errors.Is(err, provider.ErrRateLimited)); lowered > 0 {
		r.log().Warn("provider calls throttled (429) in a round; lowering the concurrency, to spare the organization's shared quota", "concurrency", lowered)
	}
	if err == nil {
		return nil
	}
	if ctx.Err() == nil && cctx.Err() != nil && !errors.Is(err, provider.ErrUnavailable) {
		err = fmt.Errorf("%w: no answer within %s: %w", provider.ErrUnavailable, timeout, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// progress is what one Resolve learned of its sandbox along the way.
type progress struct {
	// accepted: the provider accepted this Resolve's delete of the sandbox
	// (our DELETE answered 200). Only confirmation remains, and a 404 then
	// is the end of it. A read that shows the sandbox renamed for
	// destruction does not set it: that delete may be an earlier run's,
	// still under way, and a 404 then may be the access guard's (notFound).
	accepted bool
	// notFound counts 404s of the observed id not yet confirmed.
	notFound int
	// deleteSent: this Resolve sent the destructive call at least once.
	deleteSent bool
	// resend: the last destructive call was refused by a rate limit, so it
	// did nothing; it is sent again without another read.
	resend bool
	// wait, when set, is the pause before the next step instead of the
	// usual poll backoff (the confirmation delay, a 404's recheck).
	wait time.Duration
}

// Resolve runs the single-intent step until the intent is terminal or ctx
// ends, and returns the intent as journaled. The error says why it is still
// live; it is nil when the intent is terminal (gone, stopped, released,
// never-created, or foreign — the reason for foreign is in LastError).
//
// It re-reads the intent from the journal first, so a stale copy is fine.
func (r *Reaper) Resolve(ctx context.Context, in intent.Intent) (intent.Intent, error) {
	unlock, err := r.lock(ctx, in.ID)
	if err != nil {
		return in, err
	}
	defer unlock()
	cur, err := r.Journal.Get(in.ID)
	if err != nil {
		return in, fmt.Errorf("%w: read intent %s: %w", ErrJournal, in.ID, err)
	}
	in = cur
	if !in.Live() {
		return in, nil
	}
	log := r.log().With("intent", in.ID, "name", in.Name)

	p, err := r.providerFor(in)
	if err != nil {
		// Left live, and said so. Debug: a drain logs each intent it
		// leaves live once, at its end.
		log.Debug("intent left live", "err", err)
		return r.leave(in, err)
	}

	var (
		failures int   // consecutive failed calls: drives the retry backoff
		polls    int   // consecutive polls while the provider works
		last     error // why the previous step did not finish
		pr       progress
	)
	defer noteNameWait(ctx, in.ID, time.Time{})
	for {
		next, err := r.step(ctx, p, in, &pr)
		in = next
		if !errors.Is(err, ErrNotCreated) {
			noteNameWait(ctx, in.ID, time.Time{})
		}
		if err == nil {
			if !in.Live() {
				r.forget(in.ID)
				r.logOutcome(log, in)
				return in, nil
			}
			failures, polls, last = 0, 0, nil
			continue
		}
		if ctx.Err() != nil {
			// The call cut short by the deadline says less than the
			// reason the intent was still live before it: keep both.
			if last != nil {
				err = fmt.Errorf("%w (before that: %w)", err, last)
			}
			return r.leave(in, err)
		}
		if errors.Is(err, provider.ErrMisconfigured) {
			// An untrusted certificate, a wrong scheme: not an outage.
			// Asking again until the deadline would only hide it.
			log.Error("configuration error: giving up on intent", "err", err)
			return r.leave(in, err)
		}
		last = err
		var wait time.Duration
		switch {
		case pr.wait > 0:
			wait, pr.wait = pr.wait, 0
		case errors.Is(err, ErrNotCreated):
			noteNameWait(ctx, in.ID, in.CreatedAt.Add(orDefault(r.NeverCreatedHorizon, DefaultNeverCreatedHorizon)))
			wait = r.backoff(polls, orDefault(r.PollInterval, DefaultPollInterval), orDefault(r.LookupPollMax, DefaultLookupPollMax), nil)
			polls++
		case errors.Is(err, ErrInProgress):
			wait = r.backoff(polls, orDefault(r.PollInterval, DefaultPollInterval), orDefault(r.PollMax, DefaultPollMax), nil)
			polls++
		case errors.Is(err, provider.ErrPermission):
			log.Debug("configuration error: giving up on intent", "err", err) // a drain logs it once, at its end
			return r.leave(in, err)
		case errors.Is(err, provider.ErrUnauthorized) || errors.Is(err, ErrJournal) || errors.Is(err, ErrNoProvider) ||
			errors.Is(err, provider.ErrRefused) || errors.Is(err, provider.ErrErrored):
			// Asking again gets the same answer: report it now instead of
			// looping to the deadline.
			log.Debug("giving up on intent", "err", err) // a drain logs it once, at its end
			return r.leave(in, err)
		default:
			// Every other provider failure is retried: 409 (state change
			// in progress), 429, 5xx, timeouts, and answers the backend
			// could not classify. The deadline bounds it; giving up early
			// would leave a sandbox running.
			log.Debug("provider call failed; retrying", "err", err, "attempt", failures+1)
			if n, nerr := r.Journal.Note(in.ID, err.Error()); nerr == nil {
				in = n
			}
			wait = r.backoff(failures, orDefault(r.RetryBase, DefaultRetryBase), orDefault(r.RetryMax, DefaultRetryMax), err)
			failures++
		}
		if !sleep(ctx, wait) {
			return r.leave(in, err)
		}
	}
}

// leave records why an intent stays live (when the journal does not already
// say so) and returns it with that reason.
func (r *Reaper) leave(in intent.Intent, why error) (intent.Intent, error) {
	if why != nil && in.LastError != why.Error() {
		if n, err := r.Journal.Note(in.ID, why.Error()); err == nil {
			in = n
		}
	}
	return in, why
}

func (r *Reaper) logOutcome(log *slog.Logger, in intent.Intent) {
	switch in.State {
	case intent.Foreign:
		log.Warn("sandbox is not ours; left untouched", "sandbox", in.SandboxID, "why", in.LastError)
	case intent.NeverCreated:
		log.Info("intent closed: its sandbox never appeared", "horizon", orDefault(r.NeverCreatedHorizon, DefaultNeverCreatedHorizon))
	case intent.Released:
		log.Debug("intent already released by the runner")
	default:
		log.Info("sandbox "+string(in.State)+", confirmed", "sandbox", in.SandboxID)
	}
}

// step makes one unit of progress. A nil error means the intent moved (and
// the loop goes on at once, or ends if the intent is terminal); an error
// means wait (ErrNotCreated, ErrInProgress), retry, or give up.
func (r *Reaper) step(ctx context.Context, p provider.Provider, in intent.Intent, pr *progress) (intent.Intent, error) {
	if in.SandboxID == "" {
		return r.lookup(ctx, p, in, pr)
	}
	if pr.resend || in.State != intent.Releasing && !pr.deleteSent && pr.notFound == 0 && r.isVerified(in) {
		// A read already proved this id ours (the backstop's, at observe
		// time), or the last delete was throttled without effect: go
		// straight to the destructive call.
		pr.resend = false
		return r.destroy(ctx, p, in, in.SandboxID, pr)
	}
	prio := prioRead
	if in.State == intent.Releasing {
		prio = prioConfirm
	}
	var sb provider.Sandbox
	err := r.call(ctx, p, prio, provider.CallRead, "read sandbox "+in.SandboxID, func(ctx context.Context) (err error) {
		sb, err = p.Get(ctx, in.SandboxID)
		return err
	})
	if errors.Is(err, provider.ErrNotFound) {
		return r.notFound(ctx, p, in, pr, err)
	}
	if err != nil {
		return in, err
	}
	pr.notFound = 0
	return r.act(ctx, p, in, sb, pr)
}

// notFound handles a 404 for the observed id. After a delete of this
// Resolve the provider accepted, it is the end: gone. Otherwise one 404 is
// not enough (Daytona's access guard answers 404 for any error it meets): a
// second read after RecheckDelay must agree, and then the name and the list
// must show nothing of ours either (observedAbsent).
func (r *Reaper) notFound(ctx context.Context, p provider.Provider, in intent.Intent, pr *progress, err error) (intent.Intent, error) {
	pr.notFound++
	if pr.accepted || pr.notFound >= 2 {
		// Proof the sandbox is gone, unless the observed id was wrong.
		return r.observedAbsent(ctx, p, in, pr.accepted)
	}
	pr.wait = orDefault(r.RecheckDelay, DefaultRecheckDelay)
	return in, fmt.Errorf("%w: sandbox %s answered 404 once; reading it again to be sure: %w", ErrInProgress, in.SandboxID, err)
}

// lookup finds a never-observed intent's sandbox by its exact creation name.
func (r *Reaper) lookup(ctx context.Context, p provider.Provider, in intent.Intent, pr *progress) (intent.Intent, error) {
	obs, sb, found, err := r.observeByName(ctx, p, in)
	if !found {
		return obs, err
	}
	crashpoint.Hit(crashpoint.ReaperAfterLookup)
	return r.act(ctx, p, obs, sb, pr)
}

// observeByName finds in's sandbox by its name and journals its id; found
// reports whether sb is then the intent's to act on. Where several
// sandboxes may carry one name (provider.NameSharer), the look-up and the
// observe hold that name's lock, so two intents of one name never take
// the same sandbox.
func (r *Reaper) observeByName(ctx context.Context, p provider.Provider, in intent.Intent) (obs intent.Intent, sb provider.Sandbox, found bool, err error) {
	unlock, err := r.nameLock(ctx, p, in)
	if err != nil {
		return in, sb, false, err
	}
	defer unlock()
	sb, err = r.byName(ctx, p, in, prioRead, "look up name "+in.Name)
	if errors.Is(err, provider.ErrNotFound) {
		horizon := orDefault(r.NeverCreatedHorizon, DefaultNeverCreatedHorizon)
		if age := r.now().Sub(in.CreatedAt); age >= horizon {
			obs, err = r.transition(in, intent.NeverCreated, fmt.Sprintf("name %s not found %s after the intent was declared (horizon %s)", in.Name, age.Round(time.Second), horizon))
			return obs, sb, false, err
		}
		return in, sb, false, ErrNotCreated
	}
	if err != nil {
		return in, sb, false, err
	}
	if why := mismatch(in, sb); why != "" {
		obs, err = r.transition(in, intent.Foreign, fmt.Sprintf("sandbox %s named %s: %s", sb.ID, in.Name, why))
		return obs, sb, false, err
	}
	// Journal the id before anything destructive: if tether dies after the
	// delete, the next boot confirms by this id's 404 instead of guessing
	// from a missing name.
	obs, err = r.Journal.Observe(in.ID, sb.ID)
	if err != nil {
		cur, gerr := r.Journal.Get(in.ID)
		if gerr == nil && (cur.SandboxID != "" || !cur.Live()) {
			// Someone observed (or released) it meanwhile; go on from there.
			return cur, sb, false, nil
		}
		return in, sb, false, fmt.Errorf("%w: observe %s: %w", ErrJournal, sb.ID, err)
	}
	return obs, sb, true, nil
}

// act decides, from a fresh read of the intent's sandbox, whether it is done,
// still in progress, not ours, or needs the destructive call.
func (r *Reaper) act(ctx context.Context, p provider.Provider, in intent.Intent, sb provider.Sandbox, pr *progress) (intent.Intent, error) {
	if sb.Gone() {
		return r.finish(in, intent.Gone)
	}
	if why := mismatch(in, sb); why != "" {
		return r.observedNotOurs(ctx, p, in, sb, why)
	}
	stop := in.OnDrain == intent.DrainStop
	if renamedForDeletion(in, sb) {
		// Daytona renames a sandbox the moment it accepts its delete, but
		// its state lags (archived, archiving, paused, ... until the
		// destroy action runs): a delete was accepted, ours or another's.
		// Nothing more to send; confirm until the id answers 404 and the
		// list no longer shows it (observedAbsent: unless this Resolve's
		// own delete was accepted, a 404 alone may be the access guard's).
		if in.State != intent.Releasing {
			return r.transition(in, intent.Releasing, "")
		}
		return in, fmt.Errorf("%w: sandbox %s is being deleted (renamed %s, still %s)", ErrInProgress, sb.ID, sb.Name, sb.State)
	}
	r.remember(in, sb.ID)
	switch {
	case stop && sb.Stopped():
		if err := r.markStopped(ctx, p, sb, true); err != nil {
			return in, err
		}
		return r.finish(in, intent.Stopped)
	case sb.State == provider.StateDestroying, stop && sb.State == stateStopping:
		if in.State != intent.Releasing {
			return r.transition(in, intent.Releasing, "")
		}
		return in, fmt.Errorf("%w: sandbox %s is %s", ErrInProgress, sb.ID, sb.State)
	case stop:
		r.markStopped(ctx, p, sb, false)
	}
	return r.destroy(ctx, p, in, sb.ID, pr)
}

// destroy journals the intent releasing, then sends the delete (or stop) of
// a sandbox verified as the intent's.
func (r *Reaper) destroy(ctx context.Context, p provider.Provider, in intent.Intent, id string, pr *progress) (intent.Intent, error) {
	if in.State != intent.Releasing {
		var err error
		if in, err = r.transition(in, intent.Releasing, ""); err != nil || in.State != intent.Releasing {
			return in, err
		}
	}
	stop := in.OnDrain == intent.DrainStop
	kind, what, do := provider.CallDelete, "delete sandbox "+id, p.Delete
	if stop {
		kind, what, do = provider.CallStop, "stop sandbox "+id, p.Stop
	}
	if !stop {
		waitForks(ctx, in.ID)
	}
	crashpoint.Hit(crashpoint.ReaperBeforeDelete)
	pr.deleteSent = true
	err := r.call(ctx, p, prioDestroy, kind, what, func(ctx context.Context) error { return do(ctx, id) })
	crashpoint.Hit(crashpoint.ReaperAfterDelete)
	switch {
	case err == nil && stop:
		return in, nil // the next read sees stopping, then stopped
	case err == nil:
		// Accepted. Daytona destroys asynchronously: the first read that
		// confirms waits about as long as that takes. A parent of this
		// sandbox in the same drain may be deleted now.
		forkSettled(ctx, in.ID)
		pr.accepted = true
		pr.wait = orDefault(r.ConfirmDelay, DefaultConfirmDelay)
		if provider.DeletesSynchronously(p) {
			pr.wait = time.Nanosecond // confirm at once
		}
		return in, fmt.Errorf("%w: delete of sandbox %s accepted", ErrInProgress, id)
	case stop && errors.Is(err, provider.ErrNotStoppable):
		// Already stopped or archived: what the stop was for.
		return r.finish(in, intent.Stopped)
	case errors.Is(err, provider.ErrNotFound):
		// Deleted meanwhile, an earlier delete landed and lost its answer,
		// or a hiccup: reads confirm (a 404 twice, see notFound).
		return r.notFound(ctx, p, in, pr, err)
	case errors.Is(err, provider.ErrRateLimited):
		// Refused by the throttler before it did anything: send it again
		// after the Retry-After, with no read in between.
		pr.resend = true
	case errors.Is(err, provider.ErrHasForks), errors.Is(err, provider.ErrInUse):
		// Refused before it did anything, while forks of the sandbox
		// live (or containers use a Docker network or volume): the drain
		// deletes them (forks first, see Drain), and this delete is sent
		// again, without a read, once they are gone.
		pr.resend = true
		return in, fmt.Errorf("%w: sandbox %s: %w", ErrInProgress, id, err)
	}
	// A 409 (Daytona's answer to a delete while an earlier one is still
	// under way, or a state change is), a 5xx or a timeout: the read that
	// follows tells what happened (a rename means a delete was accepted).
	return in, err
}

// renamedForDeletion reports whether sb, read by the intent's observed id,
// carries Daytona's deletion rename DESTROYED_<intent name>_<unix ms>.
func renamedForDeletion(in intent.Intent, sb provider.Sandbox) bool {
	if in.SandboxID == "" || sb.ID != in.SandboxID {
		return false
	}
	ms, ok := strings.CutPrefix(sb.Name, destroyedPrefix+in.Name+"_")
	if !ok || ms == "" {
		return false
	}
	for _, c := range ms {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// finish closes an intent in a terminal state, passing through releasing
// when the intent has not been there (the journal allows gone and stopped
// only from releasing).
func (r *Reaper) finish(in intent.Intent, to intent.State) (intent.Intent, error) {
	if in.State != intent.Releasing {
		var err error
		if in, err = r.transition(in, intent.Releasing, ""); err != nil || in.State != intent.Releasing {
			return in, err
		}
	}
	return r.transition(in, to, "")
}

// transition journals a move. When the journal refuses because the intent
// moved meanwhile (the runner released it), the fresh intent is returned.
func (r *Reaper) transition(in intent.Intent, to intent.State, why string) (intent.Intent, error) {
	out, err := r.Journal.Transition(in.ID, to, why)
	if err == nil {
		return out, nil
	}
	if cur, gerr := r.Journal.Get(in.ID); gerr == nil && cur.State != in.State {
		return cur, nil
	}
	return in, fmt.Errorf("%w: %s → %s: %w", ErrJournal, in.State, to, err)
}

// mismatch says why sb is not the intent's sandbox, or "" when it is: the
// observed id, the name, and every label of the intent (ownership and scope)
// must match, and the intent must carry its ownership labels at all — an
// intent without them could match anybody's sandbox.
func mismatch(in intent.Intent, sb provider.Sandbox) string {
	if in.SandboxID != "" && sb.ID != in.SandboxID {
		return fmt.Sprintf("id %s, observed %s", sb.ID, in.SandboxID)
	}
	if sb.Name != in.Name && !renamedForDeletion(in, sb) {
		// A deleted sandbox keeps its id and labels but is renamed at once,
		// whatever its (lagging) state: DESTROYED_<name>_<unix ms>.
		return fmt.Sprintf("name %q, want %q", sb.Name, in.Name)
	}
	if in.Labels[intent.LabelOwner] == "" {
		return "intent has no " + intent.LabelOwner + " label to verify"
	}
	got, ok := sb.Labels[intent.LabelIntent]
	if !ok || got != in.ID && (in.ParentIntent == "" || got != in.ParentIntent) {
		// A fork carries its parent's labels until tether relabels it
		// (an E2B fork, for life); its exact name and the owner prove it
		// ours meanwhile.
		return fmt.Sprintf("label %s=%q, want %q", intent.LabelIntent, got, in.ID)
	}
	for k, want := range in.Labels {
		if k == intent.LabelIntent {
			continue
		}
		got, ok := sb.Labels[k]
		if !ok {
			return fmt.Sprintf("label %s missing, want %q", k, want)
		}
		if got != want {
			return fmt.Sprintf("label %s=%q, want %q", k, got, want)
		}
	}
	return ""
}

// Vouch takes sb, the provider's own answer to the create of in's sandbox
// (the Daytona API proxy reads it), as the read that proves the sandbox
// ours, as the backstop's read would: when it matches the intent (id,
// name, every label), a drain deletes it without reading it first. It
// changes nothing in the journal.
func (r *Reaper) Vouch(in intent.Intent, sb provider.Sandbox) error {
	if in.SandboxID == "" || sb.ID != in.SandboxID {
		return fmt.Errorf("vouch: sandbox %s is not the intent's observed %q", sb.ID, in.SandboxID)
	}
	if why := mismatch(in, sb); why != "" {
		return fmt.Errorf("vouch: sandbox %s: %w: %s", sb.ID, ErrForeign, why)
	}
	r.remember(in, sb.ID)
	return nil
}

// Backstop enforces the provider-side auto-stop on an observed intent's
// sandbox: it reads the sandbox, verifies it is ours, and sets auto-stop to
// AutoStopMinutes when it is disabled (0), so that a sandbox tether cannot
// reach in time still stops (and, if ephemeral, deletes itself). It retries
// within ctx. It changes nothing in the journal, but for a wrong observed id
// (correctObserved).
func (r *Reaper) Backstop(ctx context.Context, in intent.Intent) error {
	if r.AutoStopMinutes <= 0 {
		return nil
	}
	if in.SandboxID == "" {
		return fmt.Errorf("backstop %s: no sandbox observed", in.Name)
	}
	p, err := r.providerFor(in)
	if err != nil {
		return fmt.Errorf("backstop %s: %w", in.Name, err)
	}
	return r.retryObserved(ctx, p, in, func(in intent.Intent) error { return r.backstopOnce(ctx, p, in) })
}

// OnObserved runs once, a step of the caller's on a newly observed
// sandbox (E2B's timeout cap), as retryObserved does the backstop's: again
// after a transient failure until ctx ends, and on the sandbox found by
// name when the observed id answers 404 or is not the intent's (once
// returns an error wrapping provider.ErrNotFound or ErrForeign then).
func (r *Reaper) OnObserved(ctx context.Context, in intent.Intent, once func(intent.Intent) error) error {
	if in.SandboxID == "" {
		return fmt.Errorf("%s: no sandbox observed", in.Name)
	}
	p, err := r.providerFor(in)
	if err != nil {
		return fmt.Errorf("%s: %w", in.Name, err)
	}
	return r.retryObserved(ctx, p, in, once)
}

// retryObserved runs once, a step on a newly observed sandbox (the
// backstop, the lease), until it succeeds, fails for good (not ours, not
// found, a configuration error) or ctx ends, with backoff between tries. A
// first "not ours" or "not found" may mean the runner observed a wrong id:
// correctObserved looks the name up and, if it finds the intent's sandbox,
// once is tried again on it.
func (r *Reaper) retryObserved(ctx context.Context, p provider.Provider, in intent.Intent, once func(intent.Intent) error) error {
	base, max := orDefault(r.RetryBase, DefaultRetryBase), orDefault(r.RetryMax, DefaultRetryMax)
	corrected := false
	for attempt := 0; ; attempt++ {
		err := once(in)
		if !corrected && (errors.Is(err, ErrForeign) || errors.Is(err, provider.ErrNotFound)) {
			corrected = true
			if fixed, ok := r.correctObserved(ctx, p, in, err); ok {
				in = fixed
				continue
			}
		}
		if err == nil || errors.Is(err, ErrForeign) || errors.Is(err, provider.ErrNotFound) || provider.ConfigError(err) {
			return err
		}
		if ctx.Err() != nil || !sleep(ctx, r.backoff(attempt, base, max, err)) {
			return err
		}
	}
}

// readOurs reads the sandbox in journaled and checks that it is the one the
// intent created (mismatch): one that is not is ErrForeign, and must not be
// touched. step names the caller in the call's log and in errors.
func (r *Reaper) readOurs(ctx context.Context, p provider.Provider, in intent.Intent, step string) (provider.Sandbox, error) {
	var sb provider.Sandbox
	err := r.call(ctx, p, prioRead, provider.CallRead, step+": read sandbox "+in.SandboxID, func(ctx context.Context) (err error) {
		sb, err = p.Get(ctx, in.SandboxID)
		return err
	})
	if err != nil {
		return provider.Sandbox{}, err
	}
	if why := mismatch(in, sb); why != "" {
		return provider.Sandbox{}, fmt.Errorf("%s: sandbox %s: %w: %s", step, sb.ID, ErrForeign, why)
	}
	return sb, nil
}

func (r *Reaper) backstopOnce(ctx context.Context, p provider.Provider, in intent.Intent) error {
	sb, err := r.readOurs(ctx, p, in, "backstop")
	if err != nil {
		return err
	}
	if !renamedForDeletion(in, sb) {
		// This read proved the id ours: a later drain deletes it without
		// reading it again.
		r.remember(in, sb.ID)
	}
	if sb.AutoStopMinutes != 0 {
		return nil
	}
	err = r.call(ctx, p, prioDestroy, provider.CallSetter, "backstop: set auto-stop of "+sb.ID, func(ctx context.Context) error {
		return p.SetAutoStop(ctx, sb.ID, r.AutoStopMinutes)
	})
	if err == nil {
		r.log().Info("auto-stop was disabled; enforced", "intent", in.ID, "sandbox", sb.ID, "minutes", r.AutoStopMinutes)
	}
	return err
}

// backoff is the wait before try attempt+1: base doubling up to max, the
// top Jitter fraction of it drawn at random; a rate limit's Retry-After is
// a floor (plus a little jitter, so a burst of 429s does not come back as
// one burst).
func (r *Reaper) backoff(attempt int, base, max time.Duration, err error) time.Duration {
	d := base
	for i := 0; i < attempt && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	jitter := orDefault(r.Jitter, DefaultJitter)
	if jitter > 0 {
		d -= time.Duration(rand.Float64() * min(jitter, 1) * float64(d))
	}
	var rl *provider.RateLimitError
	if errors.As(err, &rl) && rl.RetryAfter > d {
		d = rl.RetryAfter + time.Duration(rand.Float64()*float64(base))
	}
	return d
}

// sleep waits d or until ctx ends, and reports whether the wait completed.
// A wait that would outlast ctx's deadline ends at once: nothing useful can
// come after it.
func sleep(ctx context.Context, d time.Duration) bool {
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < d {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
