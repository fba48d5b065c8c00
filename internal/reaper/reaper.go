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
//
// reaper.go holds the settings and the errors; resolve.go one intent's
// steps; verified.go what proves a sandbox an intent's; misobserved.go the
// remedies for a wrong observed id; sharedname.go the look-up where
// sandboxes share a name; observed.go the steps on a newly observed
// sandbox (Vouch, Backstop); lease.go and keep.go lease mode's calls and
// the keep label; call.go and gate.go every provider call and its bound;
// drain.go and forks.go the drain; sweep.go the sweep.
package reaper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/provider"
)

// Journal is the part of journal.Journal the reaper uses. Every write is
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
	// DefaultRestoreWindow is how long after a delete of a sandbox not seen
	// running a provider whose restores outlive deletes
	// (provider.Restorable: E2B) may still bring it back: a restore in
	// flight at the delete lands within it, so a 404 read before it has
	// passed is not proof. E2B gives no bound; a resume restores in about
	// a second, seconds under load.
	DefaultRestoreWindow = 10 * time.Second
	// DefaultThrottledShare: when at least this share of the calls
	// completed in one round (as many calls as the current concurrency) were
	// answered 429, the concurrency halves; a round with no 429 adds one
	// back, up to Concurrency (AIMD). Random 429s on a few percent of calls
	// do not lower it; a spent quota, which refuses everything, does.
	DefaultThrottledShare = 0.25
	// DefaultResumeSpread bounds the random extra wait of a call that
	// waited for a spent quota (see call): the calls of a fleet's tethers
	// that all saw one quota spent come back over up to this long, not
	// all at the same instant. It is at most a quarter of the wait itself,
	// so a short wait gets a short spread.
	DefaultResumeSpread = 250 * time.Millisecond
	// DefaultConfirmYield is how long, in a drain, a confirming read to a
	// quota that deletes share (E2B's bucket of the kill and the read)
	// waits after the quota was last seen spent, at the latest until the
	// hand-off point: time for the deletes of the fleet's other tethers,
	// which it cannot see, to come back after their Retry-After (E2B's is
	// 1 s at least) and take it first. As long as a default drain
	// (TETHER_DRAIN_TIMEOUT, 5 s): in a rollout the confirmations go at
	// the hand-off point; a long drain (a replay) confirms this long after
	// its own deletes last met the spent quota. Measured by bench/fleet:
	// with 2 s the confirmations took a tenth of the bucket from the kills.
	DefaultConfirmYield = 5 * time.Second
	// DefaultHandOffReserve is how long before a drain's deadline it
	// hands off a sandbox whose delete (or stop) it could not send: when
	// the next try would come later than this before the deadline, the
	// drain leaves the sandbox to the provider's own timers first
	// (provider.HandOffer), on a quota other than the delete's, and keeps
	// it live in the journal.
	DefaultHandOffReserve = time.Second
	// maxVerified bounds how many verified sandbox ids the reaper remembers
	// (one per live intent is what it needs); past it the memory is dropped
	// and the drain reads before it deletes, as it would after a restart.
	maxVerified = 100_000
)

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
	ResumeSpread     time.Duration // default DefaultResumeSpread
	HandOffReserve   time.Duration // default DefaultHandOffReserve
	ConfirmYield     time.Duration // default DefaultConfirmYield
	// RestoreWindow: default DefaultRestoreWindow (provider.Restorable).
	RestoreWindow time.Duration
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
	debts *owed
	// verified maps an intent id to the sandbox id a read proved ours (the
	// backstop's read at observe time, or a drain's). Ids are never reused,
	// so that sandbox stays ours: its delete needs no second read. An entry
	// outlives its intent's end: where names are shared, a sandbox an ended
	// intent held (killed, released) is never taken for another intent of
	// the name by a look-up whose answer is older than that end (held).
	verified map[string]string
	// teams are the accounts other than a provider's own that a read with
	// the provider's own credentials proved to be of the same team
	// (provider.NeedsAccount: a read answers only for its own team), by
	// provider name and account.
	teams map[string]bool
	// unraced are intents whose sandbox a runner deleted (through a proxy)
	// while no restore of it was in flight (NoteDeleted): a 404 of it needs
	// no restore window.
	unraced map[string]bool
}

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
	if err := r.checkAccount(p, in); err != nil {
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
// On such a provider (provider.NeedsAccount: E2B, where every credential
// of a team acts for the whole team) an intent declared under other
// credentials is acted on once a read with p's own proved them of p's
// team (proveTeam); until then it is errTeamUnproven.
func (r *Reaper) checkAccount(p provider.Provider, in intent.Intent) error {
	if in.Account == "" {
		if provider.NeedsAccount(p) {
			return fmt.Errorf("%w: declared without an account, and %s answers 404 for another account's sandbox too", ErrWrongAccount, p.Name())
		}
		return nil
	}
	if in.Account != p.Account() {
		if provider.NeedsAccount(p) {
			if r.sameTeam(p, in.Account) {
				return nil
			}
			return fmt.Errorf("%w: declared under %s, current credentials are %s, not yet proved of one team", errTeamUnproven, in.Account, p.Account())
		}
		// Not foreign: the sandbox may well be ours, reachable with the
		// credentials it was created under.
		return fmt.Errorf("%w: declared under %s, current credentials are %s", ErrWrongAccount, in.Account, p.Account())
	}
	return nil
}

// errTeamUnproven: an intent of a provider whose credentials act for a
// whole team (provider.NeedsAccount) was declared under other credentials
// than the reaper's, and no read has proved them of the same team yet.
// It matches ErrWrongAccount.
var errTeamUnproven = fmt.Errorf("%w: another credential, its team not proved", ErrWrongAccount)

// sameTeam reports whether account was proved of p's own team.
func (r *Reaper) sameTeam(p provider.Provider, account string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.teams[p.Name()+"\x00"+account]
}

// learnTeam records that a read with p's own credentials answered for a
// sandbox made under account: on a provider whose every read is scoped by
// the caller's team, that sandbox, and so account, is of p's team. Every
// intent of that account is then acted on as p's own (a 404 of one is
// gone, with the usual checks).
func (r *Reaper) learnTeam(p provider.Provider, account string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.teams == nil {
		r.teams = map[string]bool{}
	}
	key := p.Name() + "\x00" + account
	if !r.teams[key] && len(r.teams) < maxVerified {
		r.teams[key] = true
		r.log().Info("another credential of the same team: its sandboxes are drained with tether's", "provider", p.Name(), "account", account, "tether_account", p.Account())
	}
}

// NoteDeleted is told, by a proxy, that the runner's delete of intentID's
// sandbox was sent while no restore of it was in flight through the
// proxy (nor could one start by itself): on a provider whose restores
// outlive deletes (provider.Restorable), a 404 of it then needs no
// restore window. Without it, a 404 after a delete tether did not send
// waits that window.
func (r *Reaper) NoteDeleted(intentID string, restoring bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.unraced == nil || len(r.unraced) >= maxVerified {
		r.unraced = map[string]bool{}
	}
	if restoring {
		delete(r.unraced, intentID)
		return
	}
	r.unraced[intentID] = true
}

func (r *Reaper) isUnraced(intentID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.unraced[intentID]
}
