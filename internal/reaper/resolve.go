package reaper

// Resolve: one intent's steps until it is terminal or its context ends —
// a read by the observed id or a look-up by name, the decision (act), the
// destructive call (destroy), and the journal moves between them.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/crashpoint"
	"github.com/tether-run/tether/provider"
)

// stateStopping is the provider's word for a stop in progress; the reaper
// waits it out instead of asking again.
const stateStopping = "stopping"

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
	// seenRunning: the read this Resolve made right before its delete
	// showed the sandbox running. On a provider whose restores outlive
	// deletes (provider.Restorable) the accepted delete of such a sandbox
	// is final: no restore of it can be in flight.
	seenRunning bool
	// restoreUntil, on such a provider, is when a restore that may have
	// been in flight at a delete of the sandbox (this Resolve's, of one
	// not seen running, or one tether did not send) has landed for sure:
	// a 404 is proof only from then on.
	restoreUntil time.Time
	// teamUnproven: the intent was declared under other credentials than
	// the provider's own, on a provider where every credential of a team
	// acts for the team (provider.NeedsAccount), and no read has proved
	// them of one team yet: a 404 says nothing, a read that answers proves
	// it (learnTeam).
	teamUnproven bool
	// contended: a call of this Resolve was refused by a rate limit (on a
	// provider whose restores outlive deletes, where the read before the
	// kill shares its quota): the kill is sent without that read from then
	// on (step).
	contended bool
	// owing, set while a destructive call refused by a rate limit waits
	// to be sent again, ends its count in owed (confirming reads to the
	// same quota wait for it).
	owing func()
	// handedOff says what the drain left with the provider (handOff), once
	// it did; handOffTried: a hand-off was refused for good (or there is
	// none for this provider), so it is not tried again.
	handedOff    string
	handOffAt    time.Time
	handOffTried bool
}

// pay ends the count of a refused destructive call in owed.
func (pr *progress) pay() {
	if pr.owing != nil {
		pr.owing()
		pr.owing = nil
	}
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
	unproven := errors.Is(err, errTeamUnproven)
	if unproven {
		// Another credential, perhaps of the same team: the first read
		// with the provider's own tells (step).
		p, err = r.providerNamed(in)
	}
	if err != nil {
		// Left live, and said so. Debug: a drain logs each intent it
		// leaves live once, at its end.
		log.Debug("intent left live", "err", err)
		return r.leave(in, err)
	}

	pr := progress{teamUnproven: unproven}
	defer pr.pay()
	out, err := r.resolve(ctx, p, in, &pr, log)
	if pr.handedOff != "" && out.Live() {
		// Said in the journal and the report: the replay, `tether drain`
		// and an operator see that the provider ends it by itself.
		err = &HandedOff{Provider: p.Name(), Set: pr.handedOff, At: pr.handOffAt, Err: err}
		return r.leave(out, err)
	}
	return out, err
}

// resolve is Resolve's loop on an intent whose provider is p.
func (r *Reaper) resolve(ctx context.Context, p provider.Provider, in intent.Intent, pr *progress, log *slog.Logger) (intent.Intent, error) {
	var (
		failures int   // consecutive failed calls: drives the retry backoff
		polls    int   // consecutive polls while the provider works
		last     error // why the previous step did not finish
	)
	defer noteNameWait(ctx, in.ID, time.Time{})
	for {
		next, err := r.step(ctx, p, in, pr)
		in = next
		if !errors.Is(err, ErrNotCreated) {
			noteNameWait(ctx, in.ID, time.Time{})
		}
		if err == nil {
			if !in.Live() {
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
			errors.Is(err, provider.ErrRefused) || errors.Is(err, provider.ErrErrored) || errors.Is(err, ErrWrongAccount):
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
		if r.handOffDue(ctx, in, pr, wait, err) {
			in = r.handOff(ctx, p, in, pr, err)
		}
		if !sleep(ctx, wait) {
			return r.leave(in, err)
		}
	}
}

// HandedOff is why an intent is still live after a drain that left its
// sandbox to the provider's own timers (provider.HandOffer): the drain
// could not send its delete (or stop) before its deadline.
type HandedOff struct {
	Provider string
	Set      string // what the hand-off set, e.g. "auto-stop 1 min, auto-delete at once"
	At       time.Time
	Err      error // why the delete did not go through
}

func (h *HandedOff) Error() string {
	return fmt.Sprintf("handed off to %s at %s (%s), not sent before the deadline: %v", h.Provider, h.At.Format(time.TimeOnly), h.Set, h.Err)
}

func (h *HandedOff) Unwrap() error { return h.Err }

// handOffDue reports whether, before a wait of d after err, the intent's
// sandbox is to be handed off: its delete (or stop) was sent and not
// accepted (a delete is only ever sent on a sandbox proven ours), or a
// sandbox a read already proved ours could not even be read before it
// (on E2B the read before every kill, refused by the quota it shares
// with the kill), and the next try would come later than HandOffReserve
// before ctx's deadline.
func (r *Reaper) handOffDue(ctx context.Context, in intent.Intent, pr *progress, d time.Duration, err error) bool {
	deadline, ok := ctx.Deadline()
	if !ok || pr.handedOff != "" || pr.handOffTried || pr.accepted || in.SandboxID == "" || !in.Live() {
		return false
	}
	if !pr.deleteSent && !(r.isVerified(in) && errors.Is(err, provider.ErrRateLimited)) {
		return false
	}
	return time.Now().Add(d).After(deadline.Add(-orDefault(r.HandOffReserve, DefaultHandOffReserve)))
}

// handOff leaves in's sandbox to the provider's own timers, and journals
// that it did. A provider that has none, or cannot without doing more than
// the runner asked (ErrNoHandOff), and a configuration error end the
// tries; other failures are tried again at the next wait, time allowing.
func (r *Reaper) handOff(ctx context.Context, p provider.Provider, in intent.Intent, pr *progress, why error) intent.Intent {
	h, ok := p.(provider.HandOffer)
	if !ok {
		pr.handOffTried = true
		return in
	}
	stop := in.OnDrain == intent.DrainStop
	var set string
	err := r.call(ctx, p, prioDestroy, provider.CallSetter, "hand off sandbox "+in.SandboxID, func(ctx context.Context) (err error) {
		set, err = h.HandOff(ctx, in.SandboxID, stop)
		return err
	})
	log := r.log().With("intent", in.ID, "name", in.Name, "sandbox", in.SandboxID)
	switch {
	case err == nil:
		pr.handedOff, pr.handOffAt = set, time.Now()
		log.Info("delete not sent before the drain's deadline; sandbox handed off to the provider's own timers", "set", set, "why", why)
		ho := &HandedOff{Provider: p.Name(), Set: set, At: pr.handOffAt, Err: why}
		if n, nerr := r.Journal.Note(in.ID, ho.Error()); nerr == nil {
			in = n
		}
	case errors.Is(err, provider.ErrNoHandOff) || provider.ConfigError(err):
		pr.handOffTried = true
		log.Debug("sandbox not handed off", "err", err)
	default:
		log.Debug("hand-off failed; tried again at the next wait, time allowing", "err", err)
	}
	return in
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
	// A read already proved this id ours (the backstop's, at observe
	// time), or the last delete was throttled without effect: the
	// destructive call can go without a read.
	proven := !pr.teamUnproven && (pr.resend || in.State != intent.Releasing && !pr.deleteSent && pr.notFound == 0 && r.isVerified(in))
	// Where restores outlive deletes (E2B), the read right before the
	// delete is also what makes its 204 final (a sandbox seen running): it
	// replaces the read that would confirm it. It is skipped there only
	// once the quota it shares with the kill refused this intent a call
	// (contended): each read then takes a kill's place, and among a
	// fleet's tethers a served read is mostly followed by its kill refused,
	// the others' reads having taken the bucket. What stops the billing
	// goes first: such a kill's 204 is not final, its 404 is proof only
	// after the restore window (restoreWait), so a drain may end with it
	// unconfirmed, for the replay to confirm.
	if proven && (!provider.RestoresOutliveDeletes(p) || pr.contended) {
		pr.resend = false
		pr.seenRunning = false // the last read, if any, was not right before this delete
		return r.destroy(ctx, p, in, in.SandboxID, pr)
	}
	// A read that comes before a delete still owed (refused by its quota,
	// to be sent again: on E2B the read before every kill) verifies, it
	// does not confirm: a confirmation would wait for that very delete.
	resending := pr.resend || pr.owing != nil
	pr.resend = false
	prio := prioRead
	if in.State == intent.Releasing && !resending {
		prio = prioConfirm
	}
	var sb provider.Sandbox
	err := r.call(ctx, p, prio, provider.CallRead, "read sandbox "+in.SandboxID, func(ctx context.Context) (err error) {
		sb, err = p.Get(ctx, in.SandboxID)
		return err
	})
	if errors.Is(err, provider.ErrRateLimited) && provider.RestoresOutliveDeletes(p) {
		pr.contended = true
	}
	if errors.Is(err, provider.ErrNotFound) {
		if pr.teamUnproven {
			return in, r.notTeamProved(p, in, "its sandbox "+in.SandboxID+" answers 404 to tether's credentials")
		}
		return r.notFound(ctx, p, in, pr, err)
	}
	if err != nil {
		return in, err
	}
	r.proved(p, in, pr)
	pr.notFound = 0
	return r.act(ctx, p, in, sb, pr)
}

// proved records, for an intent declared under another credential, that
// a read with the provider's own answered for its sandbox: the two are of
// one team (learnTeam).
func (r *Reaper) proved(p provider.Provider, in intent.Intent, pr *progress) {
	if pr.teamUnproven {
		pr.teamUnproven = false
		r.learnTeam(p, in.Account)
	}
}

// notTeamProved is why an intent declared under another credential stays
// live: nothing answered to the provider's own credentials, which a
// sandbox of another team, and one that is gone, both do. It matches
// ErrWrongAccount.
func (r *Reaper) notTeamProved(p provider.Provider, in intent.Intent, what string) error {
	return fmt.Errorf("%w: declared under %s, current credentials are %s; %s (another team's, or gone): give tether that team's key", ErrWrongAccount, in.Account, p.Account(), what)
}

// notFound handles a 404 for the observed id. After a delete of this
// Resolve the provider accepted, it is the end: gone. Otherwise one 404 is
// not enough (Daytona's access guard answers 404 for any error it meets): a
// second read after RecheckDelay must agree, and then the name and the list
// must show nothing of ours either (observedAbsent).
func (r *Reaper) notFound(ctx context.Context, p provider.Provider, in intent.Intent, pr *progress, err error) (intent.Intent, error) {
	pr.notFound++
	if wait, why := r.restoreWait(p, in, pr); wait > 0 {
		// Not proof yet: a restore in flight at a delete may still land.
		pr.wait = wait
		return in, fmt.Errorf("%w: sandbox %s answered 404, %s; read again at %s: %w", ErrInProgress, in.SandboxID, why, pr.restoreUntil.Format(time.TimeOnly), err)
	}
	if pr.accepted || pr.notFound >= 2 {
		// Proof the sandbox is gone, unless the observed id was wrong.
		return r.observedAbsent(ctx, p, in, pr.accepted)
	}
	pr.wait = orDefault(r.RecheckDelay, DefaultRecheckDelay)
	return in, fmt.Errorf("%w: sandbox %s answered 404 once; reading it again to be sure: %w", ErrInProgress, in.SandboxID, err)
}

// restoreWait is, on a provider whose restores outlive deletes
// (provider.Restorable: E2B, infra#3636), how much longer a 404 of in's
// sandbox is not proof, and why: after this Resolve's accepted delete of
// a sandbox it did not see running, and after a delete it did not send
// (the intent is releasing: the runner's, through a proxy that could not
// rule out a restore in flight, or an earlier run's), a restore under way
// at that delete may still bring the sandbox back, within RestoreWindow.
// A 404 of an intent nobody deleted needs no wait: a restore keeps the
// snapshot it restores from visible, and a sandbox ended by its own
// timeout has none.
func (r *Reaper) restoreWait(p provider.Provider, in intent.Intent, pr *progress) (time.Duration, string) {
	if !provider.RestoresOutliveDeletes(p) {
		return 0, ""
	}
	why := "after tether's delete of it while it was not running"
	if !pr.accepted {
		if in.State != intent.Releasing || r.isUnraced(in.ID) || pr.seenRunning {
			// Nobody deleted it; the runner's delete raced no restore; or
			// this Resolve read it running since: no restore was in flight.
			return 0, ""
		}
		why = "after a delete tether did not send"
	}
	if pr.restoreUntil.IsZero() {
		pr.restoreUntil = time.Now().Add(orDefault(r.RestoreWindow, DefaultRestoreWindow))
	}
	return time.Until(pr.restoreUntil), why + ", and a restore in flight then could still bring it back"
}

// lookup finds a never-observed intent's sandbox by its exact creation name.
func (r *Reaper) lookup(ctx context.Context, p provider.Provider, in intent.Intent, pr *progress) (intent.Intent, error) {
	if in.Witnessed {
		return r.unfindable(in)
	}
	obs, sb, found, err := r.observeByName(ctx, p, in, pr.teamUnproven)
	if errors.Is(err, ErrNotCreated) && pr.teamUnproven {
		return in, r.notTeamProved(p, in, "nothing answers its name "+in.Name+" to tether's credentials")
	}
	if !found {
		return obs, err
	}
	r.proved(p, in, pr)
	crashpoint.Hit(crashpoint.ReaperAfterLookup)
	return r.act(ctx, p, obs, sb, pr)
}

// unfindable waits for the sandbox of a witnessed intent whose id was
// never journaled: it carries none of tether's metadata, so no look-up
// can find it. Like a name that never appears, it closes as
// never-created after the horizon, saying why it could not be looked for.
func (r *Reaper) unfindable(in intent.Intent) (intent.Intent, error) {
	// The proxy journals the id from the answer while the drain may
	// already hold the intent: read it again.
	if cur, err := r.Journal.Get(in.ID); err == nil && (cur.SandboxID != "" || !cur.Live()) {
		return cur, nil
	}
	const why = "a fork of a sandbox tether does not own carries that sandbox's metadata, none of tether's, and its id never reached the journal (its answer was lost), so nothing can look it up; it ends at its own timeout, which the proxy capped"
	horizon := orDefault(r.NeverCreatedHorizon, DefaultNeverCreatedHorizon)
	if age := r.now().Sub(in.CreatedAt); age >= horizon {
		return r.transition(in, intent.NeverCreated, fmt.Sprintf("not found %s after the intent was declared (horizon %s): %s", age.Round(time.Second), horizon, why))
	}
	return in, fmt.Errorf("%w: %s", ErrNotCreated, why)
}

// observeByName finds in's sandbox by its name and journals its id; found
// reports whether sb is then the intent's to act on. Where several
// sandboxes may carry one name (provider.NameSharer), the look-up and the
// observe hold that name's lock, so two intents of one name never take
// the same sandbox.
func (r *Reaper) observeByName(ctx context.Context, p provider.Provider, in intent.Intent, unproven bool) (obs intent.Intent, sb provider.Sandbox, found bool, err error) {
	unlock, err := r.nameLock(ctx, p, in)
	if err != nil {
		return in, sb, false, err
	}
	defer unlock()
	sb, err = r.byName(ctx, p, in, prioRead, "look up name "+in.Name)
	if errors.Is(err, provider.ErrNotFound) && unproven {
		// Another team's create lands where tether cannot see it: that
		// says nothing of whether it was made.
		return in, sb, false, ErrNotCreated
	}
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
	pr.seenRunning = sb.State == provider.StateStarted
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
	if !pr.seenRunning {
		pr.restoreUntil = time.Time{} // a new delete: its own window
	}
	// What this intent owes its quota is paid once the call is answered:
	// confirmations to that quota wait for it (call).
	err := r.call(ctx, p, prioDestroy, kind, what, func(ctx context.Context) error { return do(ctx, id) })
	pr.pay()
	crashpoint.Hit(crashpoint.ReaperAfterDelete)
	switch {
	case err == nil && stop:
		return in, nil // the next read sees stopping, then stopped
	case err == nil && provider.RestoresOutliveDeletes(p):
		// Accepted, and the kill was done before the answer. Of a sandbox
		// read running right before, it is final: it was in the store, so
		// no restore of it was in flight (a resume of a running sandbox is
		// refused), and its snapshot went with it (E2B:
		// handlers/sandbox_kill.go:64-103). Of any other, a restore in
		// flight could still bring it back: its 404 is proof only after
		// RestoreWindow (restoreWait).
		forkSettled(ctx, in.ID)
		pr.accepted = true
		seen := pr.seenRunning
		pr.seenRunning = false
		if seen {
			return r.finish(in, intent.Gone)
		}
		pr.restoreUntil = time.Now().Add(orDefault(r.RestoreWindow, DefaultRestoreWindow))
		pr.wait = time.Until(pr.restoreUntil)
		return in, fmt.Errorf("%w: delete of sandbox %s accepted; it was not running, so a restore in flight could bring it back: confirmed by a read at %s", ErrInProgress, id, pr.restoreUntil.Format(time.TimeOnly))
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
		// after the Retry-After, with no read in between; meanwhile it is
		// owed to its quota, ahead of confirmations.
		pr.resend, pr.contended = true, true
		pr.owing = r.owed().add(quotaOf(p, kind))
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
