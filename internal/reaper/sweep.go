package reaper

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/provider"
)

// The sweep is the fleet-level backstop: it finds, in the provider account
// itself, the sandboxes tether created (they carry tether-owner) whose
// journals are gone with their containers, and deletes the stale ones. It
// works without a journal, so every decision is made from the sandbox as
// the provider shows it, read again just before the delete.

// Daytona's errored states: a destroy can end in one.
const (
	stateError       = "error"
	stateBuildFailed = "build_failed"
)

// LabelKeep on a sandbox keeps it from every sweep, with a value
// provider.KeepValue accepts (true, 1, yes, in any case).
const LabelKeep = provider.LabelKeep

// Defaults of a sweep.
const (
	// DefaultSweepConcurrency: provider calls in flight during a sweep.
	// Lower than the drain's: nothing is waiting, and the account's rate
	// limits are shared with the runners that are still working.
	DefaultSweepConcurrency = 8
	// maxSweepPages bounds the listing, so a server that keeps answering
	// with a next cursor cannot loop a sweep forever (200 a page: 200,000
	// sandboxes).
	maxSweepPages = 1000
)

// SweepRule says which sandboxes are stale.
type SweepRule struct {
	// Provider names the provider whose account is swept (one of the
	// reaper's Providers); "" is intent.DefaultProvider.
	Provider string
	// Owner, if set, limits the sweep to sandboxes with tether-owner=Owner
	// (one journal's); empty: any owner.
	Owner string
	// Labels are scope labels every swept sandbox must carry.
	Labels map[string]string
	// OlderThan and IdleFor: a sandbox is stale when it was created more
	// than OlderThan ago and its last activity is more than IdleFor ago.
	OlderThan, IdleFor time.Duration
	// Unmarkable: also delete the stale sandboxes of a provider tether
	// cannot label kept (no provider.Labeler: E2B, whose metadata is fixed
	// at create). Without it no such sandbox is stale: one tether handed
	// back as kept, or stopped on purpose, cannot be told from one whose
	// journal is lost.
	Unmarkable bool

	markable bool // the provider swept can carry LabelKeep (set by Sweep)
}

// Sweep actions: what the sweep did, or would do, with one sandbox.
const (
	SweepDelete      = "delete"       // stale; a dry run would delete it
	SweepKeep        = "keep"         // not stale, or labelled keep
	SweepDeleted     = "deleted"      // deleted, confirmed by the provider (404 or destroyed)
	SweepGone        = "gone"         // gone before the sweep deleted it (404 on the fresh read)
	SweepInProgress  = "deleting"     // a delete was already accepted; not asked again
	SweepFailed      = "failed"       // stale, but not confirmed deleted: see Reason
	SweepChangedKeep = "kept-changed" // stale in the list, not on the fresh read before the delete
)

// SweepItem is one sandbox of the account that carries tether-owner.
type SweepItem struct {
	ID             string    `json:"id"`
	Name           string    `json:"name"`
	Owner          string    `json:"owner"`
	State          string    `json:"state"`
	CreatedAt      time.Time `json:"created_at"`
	LastActivityAt time.Time `json:"last_activity_at"`
	Action         string    `json:"action"`
	Reason         string    `json:"reason"`
}

// SweepReport is the outcome of a sweep.
type SweepReport struct {
	Listed     int           `json:"listed"`      // sandboxes the provider listed
	Pages      int           `json:"pages"`       // list pages read
	NotOurs    int           `json:"not_ours"`    // no tether-owner label: never touched, not shown
	OtherOwner int           `json:"other_owner"` // another tether-owner than --owner: never touched, not shown
	Items      []SweepItem   `json:"items"`       // every sandbox in scope, stale first
	DryRun     bool          `json:"dry_run"`
	Elapsed    time.Duration `json:"-"`
}

// Count is how many items have action a.
func (rep SweepReport) Count(a string) int {
	n := 0
	for _, it := range rep.Items {
		if it.Action == a {
			n++
		}
	}
	return n
}

// ErrSweepIncomplete: some stale sandboxes were not confirmed deleted.
var ErrSweepIncomplete = errors.New("stale sandboxes left undeleted")

// judge says whether sb is stale under rule at now, and why (or why not).
func (rule SweepRule) judge(sb provider.Listed, now time.Time) (action, why string) {
	if v, ok := sb.Labels[LabelKeep]; ok && provider.KeepValue(v) {
		return SweepKeep, "labelled " + LabelKeep + "=" + v
	}
	if sb.Gone() {
		return SweepGone, "destroyed"
	}
	if sb.DeleteRequested || sb.State == provider.StateDestroying {
		why := "a delete was already accepted"
		if sb.State == stateError || sb.State == stateBuildFailed {
			why += " and it is " + sb.State + ": Daytona answers 404 for it and never retries its destroy (sandbox.manager.ts:1088-1099, 851-856 at v0.190.0); it may still run on its runner until Daytona purges it 7 days later: ask Daytona's support to remove it"
		}
		return SweepInProgress, why
	}
	if !rule.markable && !rule.Unmarkable {
		return SweepKeep, "tether cannot label a sandbox of this provider " + LabelKeep + " (its labels are fixed at create: E2B's metadata, Docker's labels), so one it handed back as kept looks like one whose journal is lost: deleted only with --include-unmarkable"
	}
	if sb.CreatedAt.IsZero() {
		return SweepKeep, "creation time unknown"
	}
	if sb.LastActivityAt.IsZero() {
		return SweepKeep, "last activity unknown"
	}
	created, idle := now.Sub(sb.CreatedAt), now.Sub(sb.LastActivityAt)
	if created < rule.OlderThan {
		return SweepKeep, fmt.Sprintf("created %s ago, within --older-than %s", roundAge(created), rule.OlderThan)
	}
	if idle < rule.IdleFor {
		return SweepKeep, fmt.Sprintf("active %s ago, within --idle-for %s", roundAge(idle), rule.IdleFor)
	}
	return SweepDelete, fmt.Sprintf("created %s ago (--older-than %s), idle %s (--idle-for %s)", roundAge(created), rule.OlderThan, roundAge(idle), rule.IdleFor)
}

func roundAge(d time.Duration) time.Duration {
	switch {
	case d >= time.Hour:
		return d.Round(time.Minute)
	case d >= time.Minute:
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}

// inScope reports whether sb is tether's and within the rule's owner and
// labels; notOurs when it carries no tether-owner at all.
func (rule SweepRule) inScope(sb provider.Listed) (ok, notOurs bool) {
	owner := sb.Labels[intent.LabelOwner]
	if owner == "" {
		return false, true
	}
	if rule.Owner != "" && owner != rule.Owner {
		return false, false
	}
	for k, v := range rule.Labels {
		if got, has := sb.Labels[k]; !has || got != v {
			return false, false
		}
	}
	return true, false
}

// sweptAccount is a provider that can page through its whole account.
type sweptAccount interface {
	provider.Provider
	provider.Account
}

// Sweep lists every sandbox of the account in rule's scope, judges each,
// and, when act is true, deletes the stale ones: each is read again first
// and deleted only if it is still the same sandbox, still tether's, still
// not labelled keep and still stale; then it is polled until the provider
// confirms it gone. With act false nothing is changed. Calls go through
// the reaper's gate (Concurrency) with its retries, honouring Retry-After
// and announced quota resets. The error is ErrSweepIncomplete (wrapped)
// when stale sandboxes were left, or the listing's error.
func (r *Reaper) Sweep(ctx context.Context, rule SweepRule, act bool) (SweepReport, error) {
	start := time.Now()
	rep := SweepReport{DryRun: !act, Items: []SweepItem{}}
	name := rule.Provider
	if name == "" {
		name = intent.DefaultProvider
	}
	p, ok := r.Providers.Named(name)
	if !ok {
		return rep, fmt.Errorf("sweep: %w %q (tether has %s)", ErrNoProvider, name, r.Providers.Names())
	}
	acct, ok := p.(sweptAccount)
	if !ok {
		return rep, fmt.Errorf("sweep: %w: %s cannot list its account", ErrNoProvider, p.Name())
	}
	if rule.OlderThan <= 0 || rule.IdleFor <= 0 {
		return rep, errors.New("sweep: --older-than and --idle-for must be positive")
	}
	_, rule.markable = p.(provider.Labeler)
	log := r.log().With("component", "sweep")
	// Filter on the server by what must match exactly; tether-owner
	// without --owner can only be checked here (any value).
	q := provider.AccountQuery{Labels: intent.MergeLabels(rule.Labels), IncludeErroredDeleted: true}
	if rule.Owner != "" {
		q.Labels[intent.LabelOwner] = rule.Owner
	}
	var stale []provider.Listed
	now := r.now()
	cursor := ""
	for {
		if rep.Pages == maxSweepPages {
			return rep, fmt.Errorf("sweep: more than %d pages of sandboxes: %w", maxSweepPages, provider.ErrUnavailable)
		}
		var page []provider.Listed
		var next string
		// Before the first page nothing has been done: a URL nothing
		// answers at (refused, a host that does not resolve) fails at
		// once instead of being retried until the sweep's deadline.
		first := rep.Pages == 0
		err := r.retry(ctx, acct, provider.CallRead, "list sandboxes", func(ctx context.Context) (err error) {
			page, next, err = acct.ListPage(ctx, q, cursor)
			if first && errors.Is(err, provider.ErrUnreachable) {
				err = noRetry{err}
			}
			return err
		})
		if err != nil {
			return rep, fmt.Errorf("sweep: %w", err)
		}
		rep.Pages++
		for _, sb := range page {
			rep.Listed++
			in, notOurs := rule.inScope(sb)
			if !in {
				if notOurs {
					rep.NotOurs++
				} else {
					rep.OtherOwner++
				}
				continue
			}
			action, why := rule.judge(sb, now)
			if action == SweepDelete {
				stale = append(stale, sb)
			}
			rep.Items = append(rep.Items, sweepItem(sb, action, why))
		}
		if next == "" {
			break
		}
		cursor = next
	}
	log.Info("sweep: listed", "sandboxes", rep.Listed, "pages", rep.Pages, "stale", len(stale), "dry_run", !act)
	if act && len(stale) > 0 {
		results := make(map[string]SweepItem, len(stale))
		var mu sync.Mutex
		var wg sync.WaitGroup
		work := make(chan provider.Listed)
		workers := min(orDefault(r.Concurrency, DefaultSweepConcurrency)*IntentsPerCall, len(stale))
		for range workers {
			wg.Go(func() {
				for sb := range work {
					it := r.sweepOne(ctx, acct, rule, sb)
					mu.Lock()
					results[sb.ID] = it
					mu.Unlock()
				}
			})
		}
		for _, sb := range stale {
			work <- sb
		}
		close(work)
		wg.Wait()
		for i, it := range rep.Items {
			if res, ok := results[it.ID]; ok && it.Action == SweepDelete {
				rep.Items[i] = res
			}
		}
	}
	order := map[string]int{SweepFailed: 0, SweepDelete: 1, SweepDeleted: 2, SweepGone: 3, SweepChangedKeep: 4, SweepInProgress: 5, SweepKeep: 6}
	sort.SliceStable(rep.Items, func(a, b int) bool { return order[rep.Items[a].Action] < order[rep.Items[b].Action] })
	rep.Elapsed = time.Since(start)
	if n := rep.Count(SweepFailed); n > 0 {
		return rep, fmt.Errorf("sweep: %d of %d: %w", n, len(stale), ErrSweepIncomplete)
	}
	return rep, nil
}

func sweepItem(sb provider.Listed, action, why string) SweepItem {
	return SweepItem{
		ID: sb.ID, Name: sb.Name, Owner: sb.Labels[intent.LabelOwner], State: sb.State,
		CreatedAt: sb.CreatedAt, LastActivityAt: sb.LastActivityAt, Action: action, Reason: why,
	}
}

// sweepOne deletes one stale sandbox: a fresh read that must show the same
// sandbox, still tether's, still stale; the delete; polls until it is gone.
func (r *Reaper) sweepOne(ctx context.Context, acct sweptAccount, rule SweepRule, listed provider.Listed) SweepItem {
	log := r.log().With("component", "sweep", "sandbox", listed.ID, "name", listed.Name)
	fail := func(err error) SweepItem {
		log.Warn("sweep: stale sandbox not confirmed deleted", "err", err)
		return sweepItem(listed, SweepFailed, err.Error())
	}
	var fresh provider.Listed
	err := r.retry(ctx, acct, provider.CallRead, "read sandbox "+listed.ID, func(ctx context.Context) (err error) {
		fresh, err = acct.Inspect(ctx, listed.ID)
		return err
	})
	if errors.Is(err, provider.ErrNotFound) {
		return sweepItem(listed, SweepGone, "answered 404 before the sweep deleted it")
	}
	if err != nil {
		return fail(err)
	}
	if why := sweepMismatch(listed, fresh); why != "" {
		return sweepItem(fresh, SweepChangedKeep, why)
	}
	if in, _ := rule.inScope(fresh); !in {
		return sweepItem(fresh, SweepChangedKeep, "its labels no longer match the sweep's scope")
	}
	action, why := rule.judge(fresh, r.now())
	switch action {
	case SweepGone:
		return sweepItem(fresh, SweepGone, why)
	case SweepKeep:
		return sweepItem(fresh, SweepChangedKeep, why+" (on a fresh read)")
	case SweepDelete:
		if err := r.sweepDelete(ctx, acct, listed.ID, fresh.State); err != nil {
			return fail(err)
		}
	}
	// Confirm: only a 404 for this id, or its destroyed state, is gone.
	for polls := 0; ; polls++ {
		var cur provider.Listed
		err := r.retry(ctx, acct, provider.CallRead, "confirm sandbox "+listed.ID, func(ctx context.Context) (err error) {
			cur, err = acct.Inspect(ctx, listed.ID)
			return err
		})
		if err == nil && cur.State == provider.StateStarted && provider.RestoresOutliveDeletes(acct) {
			// A restore in flight at the delete brought it back
			// (infra#3636): it runs, so this delete is final.
			log.Info("sweep: deleted, but a restore under way brought it back; deleting it again", "state", cur.State)
			if err := r.sweepDelete(ctx, acct, listed.ID, cur.State); err != nil {
				return fail(err)
			}
			continue
		}
		if errors.Is(err, provider.ErrNotFound) {
			// Daytona answers 404 also for a sandbox whose destroy ended
			// in error (sandbox.service.ts:1777-1783 at v0.190.0): it
			// still exists, listed only with includeErroredDeleted.
			if failed, ferr := r.destroyFailed(ctx, acct, listed); ferr != nil || failed != "" {
				if ferr != nil {
					return fail(fmt.Errorf("deleted and answered 404, but whether its destroy ended in error could not be read: %w", ferr))
				}
				return fail(errors.New(failed))
			}
		}
		if errors.Is(err, provider.ErrNotFound) || err == nil && cur.Gone() {
			log.Info("sweep: stale sandbox deleted, confirmed", "why", why)
			return sweepItem(listed, SweepDeleted, why)
		}
		if err == nil && (cur.State == stateError || cur.State == stateBuildFailed) && cur.DeleteRequested {
			return fail(fmt.Errorf("its destroy ended in state %s; the sandbox still exists", cur.State))
		}
		if err != nil {
			return fail(err)
		}
		if polls == retryNoticeEvery {
			until := "none"
			if d, ok := ctx.Deadline(); ok {
				until = d.Format(time.TimeOnly)
			}
			log.Info("sweep: deleted; waiting for Daytona to show it gone", "state", cur.State, "deadline", until)
		}
		if !sleep(ctx, r.backoff(polls, orDefault(r.PollInterval, DefaultPollInterval), orDefault(r.PollMax, DefaultPollMax), nil)) {
			return fail(fmt.Errorf("deleted, but not confirmed gone before the sweep's deadline (state %s)", cur.State))
		}
	}
}

// sweepDelete deletes one stale sandbox, last seen in state. Where a
// restore in flight outlives a delete (provider.Restorable: E2B), the
// delete of a sandbox not seen running is confirmed only once
// RestoreWindow has passed: it waits that long before the confirming
// read, as the drain does.
func (r *Reaper) sweepDelete(ctx context.Context, acct sweptAccount, id, state string) error {
	err := r.retry(ctx, acct, provider.CallDelete, "delete sandbox "+id, func(ctx context.Context) error {
		return acct.Delete(ctx, id)
	})
	if err != nil && !errors.Is(err, provider.ErrNotFound) {
		return err
	}
	if provider.RestoresOutliveDeletes(acct) && state != provider.StateStarted {
		window := orDefault(r.RestoreWindow, DefaultRestoreWindow)
		if !sleep(ctx, window) {
			return fmt.Errorf("deleted, but not confirmed gone before the sweep's deadline: it was %s, and a restore in flight could bring it back within %s", state, window)
		}
	}
	return nil
}

// destroyFailed reads, in the list that includes them, whether the sandbox
// that answered 404 after its delete is one whose destroy ended in error,
// and says so ("" when it is not listed there so: gone).
func (r *Reaper) destroyFailed(ctx context.Context, acct sweptAccount, listed provider.Listed) (string, error) {
	q := provider.AccountQuery{Labels: listed.Labels, IncludeErroredDeleted: true}
	cursor := ""
	for range maxSweepPages {
		var page []provider.Listed
		var next string
		err := r.retry(ctx, acct, provider.CallRead, "list sandboxes labelled as "+listed.ID, func(ctx context.Context) (err error) {
			page, next, err = acct.ListPage(ctx, q, cursor)
			return err
		})
		if err != nil {
			return "", err
		}
		for _, sb := range page {
			if sb.ID == listed.ID && (sb.State == stateError || sb.State == stateBuildFailed) {
				return fmt.Sprintf("its destroy ended in state %s (Daytona answers 404 for it, but it still exists)", sb.State), nil
			}
		}
		if next == "" {
			return "", nil
		}
		cursor = next
	}
	return "", fmt.Errorf("more than %d pages: %w", maxSweepPages, provider.ErrUnavailable)
}

// sweepMismatch says why the fresh read is not the listed sandbox (or no
// longer tether's), or "".
func sweepMismatch(listed, fresh provider.Listed) string {
	if fresh.ID != listed.ID {
		return fmt.Sprintf("the fresh read is sandbox %s", fresh.ID)
	}
	if fresh.Name != listed.Name && !strings.HasPrefix(fresh.Name, destroyedPrefix+listed.Name+"_") {
		return fmt.Sprintf("renamed %q since the list", fresh.Name)
	}
	if fresh.Labels[intent.LabelOwner] != listed.Labels[intent.LabelOwner] {
		return fmt.Sprintf("label %s is now %q", intent.LabelOwner, fresh.Labels[intent.LabelOwner])
	}
	return ""
}

// retry runs one kind of provider call through the gate until it succeeds,
// fails for good (not found, unauthorized, refused, or wrapped in noRetry),
// or ctx ends. It waits out a quota the provider announced spent before
// calling, and a Retry-After after a 429. A call that keeps failing is said
// at info level (the first failure, then every retryNoticeEvery), with what
// it waits for and until when, so a sweep against a provider that does not
// answer is never silent.
func (r *Reaper) retry(ctx context.Context, p provider.Provider, kind, what string, f func(context.Context) error) error {
	prio := prioRead
	if kind == provider.CallDelete {
		prio = prioDestroy
	}
	for attempt := 0; ; attempt++ {
		if t, ok := p.(provider.Throttled); ok {
			if until := t.ExhaustedUntil(kind); !until.IsZero() {
				if d := time.Until(until); d > 0 {
					r.log().Info("sweep: waiting for the provider's quota to reset", "what", what, "kind", kind, "until", until.Format(time.TimeOnly))
					if !sleep(ctx, d) {
						return fmt.Errorf("%s: quota spent until %s: %w", what, until.Format(time.RFC3339), context.DeadlineExceeded)
					}
				}
			}
		}
		err := r.call(ctx, p, prio, kind, what, f)
		if errors.As(err, new(noRetry)) {
			return err
		}
		if err == nil || !provider.Retryable(err) || ctx.Err() != nil {
			return err
		}
		if attempt%retryNoticeEvery == 0 {
			until := "none"
			if d, ok := ctx.Deadline(); ok {
				until = d.Format(time.TimeOnly)
			}
			r.log().Info("sweep: provider call failed; retrying until it answers or the sweep's deadline", "what", what, "err", err, "attempt", attempt+1, "deadline", until)
		} else {
			r.log().Debug("sweep: provider call failed; retrying", "what", what, "err", err, "attempt", attempt+1)
		}
		if !sleep(ctx, r.backoff(attempt, orDefault(r.RetryBase, DefaultRetryBase), orDefault(r.RetryMax, DefaultRetryMax), err)) {
			return err
		}
	}
}

// retryNoticeEvery: a failing sweep call is logged at info level on its
// first failure and then once every this many (at the default backoff,
// about every 20 s); the others at debug.
const retryNoticeEvery = 10

// noRetry marks a failure retry returns at once, though the provider calls
// it retryable.
type noRetry struct{ err error }

func (e noRetry) Error() string { return e.err.Error() }
func (e noRetry) Unwrap() error { return e.err }
