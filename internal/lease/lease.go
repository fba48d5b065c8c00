// Package lease is the renewer of lease mode (tether run --lease): while the
// child runs, it renews every observed sandbox's lease on the provider's
// own control plane (Daytona: POST /sandbox/{id}/last-activity), well
// inside the short auto-stop interval lease mode sets, so that the sandbox
// stops (and, for on_drain delete, is deleted) only once tether is gone —
// however it went. It renews only what the journal holds as observed, and
// reads the intent again just before each call, so a released or drained
// intent is not renewed again.
//
// A renewal cannot tell a live sandbox from a deleted one: Daytona answers
// last-activity 201 for a destroyed sandbox until it purges it a day later
// (sandbox.controller.ts, updateLastActivity; the activity service never
// reads the sandbox's state). So once per lease the renewer takes a census:
// one list of the owner's sandboxes (a page per 100 live ones), and a read
// of each renewed sandbox missing from it (the list lags behind creates). A
// sandbox that reads as destroying or destroyed, or answers 404 to two
// censuses in a row (Daytona's access guard answers 404 for any error it
// meets), is not renewed again; the drain confirms it gone.
//
// Renewals are jittered, bounded in number in flight, and hold back when
// the provider says its rate limit is spent (a 429's Retry-After, or a
// quota announced as exhausted). A sandbox whose renewals keep failing for
// RiskAfter is logged at error level — it may be stopped under a live
// runner — and counted; if they fail until only RescueLeft of its lease is
// left, its auto-stop is lengthened to Rescue minutes (the rescue, said at
// error level), and its lease is set again once a renewal gets through.
//
// Beside the renewer, Policy (policy.go) is what lease mode does to one
// sandbox: the short auto-stop when it is observed, the hand-back, durable,
// when the runner releases it as kept.
//
// Lease mode is Daytona's. A provider whose sandboxes end at a timeout
// (E2B) has its own renewer here, TimeoutRenewer (timeout.go): the timeout
// cut to a cap and renewed while the runner lives; it reports to the same
// Recorder.
package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/provider"
)

// Defaults, as shares of the lease (the auto-stop interval as a duration).
const (
	// DefaultPeriodShare: a sandbox is renewed every third of its lease
	// (40 s at the default lease of 2 minutes), which leaves two thirds for
	// the provider's own lag (Daytona: a renewal reaches its check within
	// 10 s, and the check runs every 10 s) and for retries.
	DefaultPeriodShare = 1.0 / 3
	// DefaultJitter: each renewal comes up to this share of the period
	// early, so renewals of sandboxes made together spread out.
	DefaultJitter = 0.2
	// DefaultRiskShare: renewals of one sandbox failing for this share of
	// the lease are logged loudly and counted (30 s at 2 minutes).
	DefaultRiskShare = 0.25
	// DefaultConcurrency bounds the renewals in flight at once.
	DefaultConcurrency = 8
	// DefaultRetryShare: after a failed renewal the next try comes this
	// share of the period later, doubling, up to a quarter of the period.
	DefaultRetryShare = 0.1
	// DefaultRescueShare: renewals of one sandbox failing until this share
	// of the lease is left before Daytona would stop it (30 s at 2
	// minutes: three tries of the one call left) bring the rescue: its
	// auto-stop is lengthened to Rescue minutes, said at error level.
	DefaultRescueShare = 0.25
	// DefaultRescue is the auto-stop (minutes) a rescued sandbox gets when
	// Renewer.Rescue is not set: Daytona's own default.
	DefaultRescue = 15
	// DefaultMinSpacing: two renewals of one sandbox are never closer than
	// this. Daytona takes one last-activity call per sandbox per 5 s and
	// answers the others 201 without doing anything
	// (SANDBOX_ACTIVITY_THROTTLE_TTL_SECONDS; sandbox-activity.service.ts:41-51),
	// so a closer retry would look like a renewal and be none.
	DefaultMinSpacing = 5 * time.Second
	// maxTick bounds the renewer's clock resolution.
	maxTick = time.Second
)

// Journal is what the renewer reads of the journal.
type Journal interface {
	Live() ([]intent.Intent, error)
	Get(id string) (intent.Intent, error)
}

// Recorder is told what the renewer sees, for metrics. May be nil.
type Recorder interface {
	// LeaseAtRisk: renewals of one sandbox have failed for RiskAfter.
	LeaseAtRisk()
	// Leased is how many sandboxes the renewer keeps alive now.
	Leased(n int)
}

// Renewer renews the leases of every observed intent's sandbox until its
// context ends. The zero value of each setting means its default.
type Renewer struct {
	Journal Journal
	// Provider must implement provider.Leaser. Intents of another provider
	// account are not renewed (the drain reports them).
	Provider provider.Provider
	// Lease is the auto-stop interval as a duration (minutes x 1 minute;
	// tests speed the minute up). Required.
	Lease time.Duration

	Period      time.Duration // default Lease x DefaultPeriodShare
	Jitter      float64       // default DefaultJitter; negative: none
	RiskAfter   time.Duration // default Lease x DefaultRiskShare
	RetryBase   time.Duration // default Period x DefaultRetryShare
	MinSpacing  time.Duration // default DefaultMinSpacing
	Concurrency int           // default DefaultConcurrency
	// Scan is how often the journal is read for newly observed sandboxes
	// (default a quarter of the period, at most 5 s).
	Scan time.Duration
	// Census is how often the renewed sandboxes are checked for being
	// deleted behind tether's back (default: once per Lease).
	Census time.Duration

	Recorder Recorder
	Logger   *slog.Logger
	// Kept, if set, is called in a goroutine of its own with each intent
	// the renewer stops renewing because the runner released it as kept
	// (intent.OutcomeKept): the sandbox is the runner's from then on.
	Kept func(intent.Intent)

	// Rescue is the auto-stop (minutes) a sandbox gets when its renewals
	// keep failing and its lease is about to run out (default
	// DefaultRescue; the sidecar passes the backstop, --daytona-autostop):
	// Daytona would otherwise stop it under the live runner. RescueLeft is
	// how much of the lease is left when that is tried (default Lease x
	// DefaultRescueShare).
	Rescue     int
	RescueLeft time.Duration
	// Restore, if set, is called in a goroutine of its own with a rescued
	// sandbox's intent once its renewals succeed again, to give it its
	// lease back (the policy's Apply: renew, let it settle, set the short
	// auto-stop).
	Restore func(intent.Intent)
}

// entry is one sandbox being renewed.
type entry struct {
	intent, sandbox string
	owner           string // the intent's tether-owner label: the census lists by it
	next            time.Time
	failingSince    time.Time
	// lastOK is when its last renewal succeeded (when it was added: its
	// lease was applied with a renewal); the lease runs out a Lease later.
	lastOK time.Time
	// rescued: its auto-stop was lengthened (Rescue) while its renewals
	// failed; rescueAt: no rescue is tried before then (one at a time,
	// MinSpacing apart).
	rescued      bool
	rescueAt     time.Time
	attempt      int
	warned, busy bool
	// missing counts the censuses in a row that read the sandbox as 404;
	// gone: two of them, or a census that read the sandbox destroying or
	// destroyed: it is not renewed again (the drain confirms it and closes
	// the intent). A renewal's 404 is no sign: Daytona answers a renewal of
	// a deleted sandbox 201 for a day, and a 404 of a live one is its
	// access guard's hiccup (resource-access.guard.ts:21-26).
	missing int
	gone    bool
}

// result is what one renewal came to.
type result struct {
	intent string
	err    error
	drop   bool          // the intent is no longer observed with that sandbox
	gone   intent.Intent // the intent as the journal has it then, if it has it
	until  time.Time     // the quota is spent until then: nothing was sent
}

// loop is one Run: its settings, resolved once, and its state, owned by
// Run's goroutine alone.
type loop struct {
	r      *Renewer
	leaser provider.Leaser
	log    *slog.Logger

	period, riskAfter, retryBase, scanEvery, spacing, censusEvery time.Duration
	rescueLeft                                                    time.Duration
	conc, rescueMinutes                                           int
	jitter                                                        float64
	rescues                                                       chan rescued

	entries  map[string]*entry
	results  chan result
	inFlight int
	hold     hold // a 429 or a spent quota: no call goes out before then
	nextScan time.Time

	censuses   chan []verdict
	censusBusy bool
	nextCensus time.Time
}

// verdict is what a census found of one renewed sandbox it did not list.
type verdict struct {
	intent, sandbox string
	gone            bool // read as destroying or destroyed
	notFound        bool // answered 404
	found           bool // read as alive: a list that lagged behind its create
}

func (r *Renewer) newLoop(leaser provider.Leaser) *loop {
	l := &loop{r: r, leaser: leaser, log: r.log(), entries: map[string]*entry{}, results: make(chan result), censuses: make(chan []verdict)}
	l.period = r.Period
	if l.period <= 0 {
		l.period = time.Duration(float64(r.Lease) * DefaultPeriodShare)
	}
	l.riskAfter = r.RiskAfter
	if l.riskAfter <= 0 {
		l.riskAfter = time.Duration(float64(r.Lease) * DefaultRiskShare)
	}
	l.retryBase = r.RetryBase
	if l.retryBase <= 0 {
		l.retryBase = time.Duration(float64(l.period) * DefaultRetryShare)
	}
	l.scanEvery = r.Scan
	if l.scanEvery <= 0 {
		l.scanEvery = min(l.period/4, 5*time.Second)
	}
	l.censusEvery = r.Census
	if l.censusEvery <= 0 {
		l.censusEvery = r.Lease
	}
	l.rescueLeft = r.RescueLeft
	if l.rescueLeft <= 0 {
		l.rescueLeft = time.Duration(float64(r.Lease) * DefaultRescueShare)
	}
	l.rescueMinutes = r.Rescue
	if l.rescueMinutes <= 0 {
		l.rescueMinutes = DefaultRescue
	}
	l.rescues = make(chan rescued)
	l.spacing = r.MinSpacing
	if l.spacing <= 0 {
		l.spacing = DefaultMinSpacing
	}
	l.conc = r.Concurrency
	if l.conc <= 0 {
		l.conc = DefaultConcurrency
	}
	switch {
	case r.Jitter == 0:
		l.jitter = DefaultJitter
	case r.Jitter > 0:
		l.jitter = min(r.Jitter, 1)
	}
	return l
}

func (r *Renewer) log() *slog.Logger {
	if r.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return r.Logger
}

// Run renews until ctx ends; it returns nil then. It fails at once if the
// provider cannot renew or the lease is not set.
func (r *Renewer) Run(ctx context.Context) error {
	leaser, ok := r.Provider.(provider.Leaser)
	if r.Provider == nil || !ok {
		return errors.New("lease mode: the provider cannot renew sandboxes")
	}
	if r.Lease <= 0 {
		return fmt.Errorf("lease mode: lease %s: must be positive", r.Lease)
	}
	l := r.newLoop(leaser)
	ticker := time.NewTicker(min(l.period/8, maxTick))
	defer ticker.Stop()
	l.nextCensus = time.Now().Add(l.censusEvery)
	for {
		now := time.Now()
		if !now.Before(l.nextScan) {
			l.nextScan = now.Add(l.scanEvery)
			l.scan(now)
		}
		if !l.censusBusy && !now.Before(l.nextCensus) && !now.Before(l.hold.until()) {
			l.nextCensus = now.Add(l.censusEvery)
			l.startCensus(ctx)
		}
		if !now.Before(l.hold.until()) {
			l.dispatch(ctx, now)
		}
		l.rescueDue(ctx, now)
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		case res := <-l.results:
			l.settle(res, time.Now())
		case vs := <-l.censuses:
			l.censusBusy = false
			l.judge(vs)
		case res := <-l.rescues:
			l.rescueSettled(res, time.Now())
		}
	}
}

// early is how much sooner than a period the next renewal comes.
func (l *loop) early() time.Duration {
	return time.Duration(rand.Float64() * l.jitter * float64(l.period))
}

// retry is the wait before the next try of a failing renewal.
func (l *loop) retry(e *entry) time.Duration {
	d := l.retryBase
	for i := 0; i < e.attempt && d < l.period/4; i++ {
		d *= 2
	}
	d = min(d, l.period/4)
	d -= time.Duration(rand.Float64() * l.jitter * float64(d))
	return max(d, l.spacing)
}

// dispatch sends the renewals that are due, the most overdue first, as
// long as slots are free.
func (l *loop) dispatch(ctx context.Context, now time.Time) {
	var due []*entry
	for _, e := range l.entries {
		if !e.busy && !e.gone && !e.next.After(now) {
			due = append(due, e)
		}
	}
	sort.Slice(due, func(i, j int) bool { return due[i].next.Before(due[j].next) })
	for _, e := range due {
		if l.inFlight == l.conc {
			return
		}
		l.inFlight++
		e.busy = true
		go func(e entry) {
			res := l.renew(ctx, e)
			select {
			case l.results <- res:
			case <-ctx.Done():
			}
		}(*e)
	}
}

// settle takes in what one renewal came to.
func (l *loop) settle(res result, now time.Time) {
	l.inFlight--
	e, ok := l.entries[res.intent]
	if !ok {
		return
	}
	e.busy = false
	var rl *provider.RateLimitError
	switch {
	case res.drop:
		delete(l.entries, res.intent)
		l.r.released(res.gone)
		l.log.Debug("lease no longer renewed: the intent is not observed any more", "intent", e.intent, "sandbox", e.sandbox)
	case !res.until.IsZero():
		// Held, not failed: tried again when the hold lifts. The hold is
		// not extended with it: a 429's Retry-After is in it already, and
		// a quota spent for renewals alone holds nothing else (the census
		// and the rescue ask for their own kinds of call).
		e.next = res.until
	case res.err == nil:
		if e.warned {
			l.log.Warn("lease renewed again", "intent", e.intent, "sandbox", e.sandbox, "failed_for", now.Sub(e.failingSince).Round(time.Millisecond))
		}
		e.failingSince, e.attempt, e.warned = time.Time{}, 0, false
		e.lastOK, e.rescueAt = now, time.Time{}
		if e.rescued {
			e.rescued = false
			l.restore(e)
		}
		e.next = now.Add(l.period - l.early())
	default:
		if e.failingSince.IsZero() {
			e.failingSince = now
		}
		wait := l.retry(e)
		if errors.As(res.err, &rl) && rl.RetryAfter > 0 {
			// The throttler refuses the whole organization until then
			// (renew has held the other calls back already).
			wait = rl.RetryAfter
		}
		e.attempt++
		e.next = now.Add(wait)
		l.log.Debug("lease renewal failed", "intent", e.intent, "sandbox", e.sandbox, "attempt", e.attempt, "retry_in", wait, "err", res.err)
		if !e.warned && now.Sub(e.failingSince) >= l.riskAfter {
			e.warned = true
			l.log.Error("lease renewals keep failing: the provider may stop this sandbox under the live runner",
				"intent", e.intent, "sandbox", e.sandbox, "failing_for", now.Sub(e.failingSince).Round(time.Millisecond),
				"lease", l.r.Lease, "err", res.err)
			if l.r.Recorder != nil {
				l.r.Recorder.LeaseAtRisk()
			}
		}
	}
}

// scan adds the newly observed intents and drops those no longer observed.
// A new one is first renewed within a period (the lease was applied on
// observe, with a renewal of its own).
func (l *loop) scan(now time.Time) {
	r := l.r
	live, err := r.Journal.Live()
	if err != nil {
		l.log.Warn("lease: cannot read the journal; renewing the sandboxes known so far", "err", err)
		return
	}
	account := r.Provider.Account()
	seen := make(map[string]bool, len(live))
	for _, in := range live {
		if in.State != intent.Observed || in.SandboxID == "" || (in.Account != "" && in.Account != account) {
			continue
		}
		if in.Provider != "" && in.Provider != r.Provider.Name() {
			continue
		}
		seen[in.ID] = true
		if e, ok := l.entries[in.ID]; ok && e.sandbox == in.SandboxID {
			continue
		}
		l.entries[in.ID] = &entry{intent: in.ID, sandbox: in.SandboxID, owner: in.Labels[intent.LabelOwner], next: now.Add(l.period - l.early()), lastOK: now}
	}
	for id, e := range l.entries {
		if !seen[id] && !e.busy {
			delete(l.entries, id)
			if in, err := r.Journal.Get(id); err == nil {
				r.released(in)
			}
		}
	}
	if r.Recorder != nil {
		r.Recorder.Leased(len(l.entries))
	}
}

// renew makes one renewal of e, unless its intent is no longer observed
// with that sandbox, or a 429 or the provider said the quota is spent: the
// hold is read right before the call, so a renewal dispatched before a 429
// came back is held too. A 429 it meets holds every other call at once.
func (l *loop) renew(ctx context.Context, e entry) result {
	r := l.r
	in, err := r.Journal.Get(e.intent)
	if err != nil || in.State != intent.Observed || in.SandboxID != e.sandbox {
		return result{intent: e.intent, drop: true, gone: in}
	}
	if until := l.held(provider.CallRenew); !until.IsZero() {
		return result{intent: e.intent, until: until}
	}
	err = l.leaser.Renew(ctx, e.sandbox)
	l.holdFor(err)
	return result{intent: e.intent, err: err}
}

// hold is when calls may go out again after a 429 (its Retry-After: the
// throttler refuses the whole organization until then), shared by the
// loop, its renewals and its census.
type hold struct {
	mu sync.Mutex
	t  time.Time
}

func (h *hold) until() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.t
}

func (h *hold) extend(t time.Time) {
	h.mu.Lock()
	h.t = later(h.t, t)
	h.mu.Unlock()
}

// held is when calls of kind may go out again, zero if now: after a 429's
// Retry-After, or a quota the provider said is spent.
func (l *loop) held(kind string) time.Time {
	now := time.Now()
	until := l.hold.until()
	if t, ok := l.r.Provider.(provider.Throttled); ok {
		until = later(until, t.ExhaustedUntil(kind))
	}
	if now.Before(until) {
		return until
	}
	return time.Time{}
}

// holdFor extends the hold to the Retry-After of a 429, if err is one.
func (l *loop) holdFor(err error) {
	var rl *provider.RateLimitError
	if errors.As(err, &rl) && rl.RetryAfter > 0 {
		l.hold.extend(time.Now().Add(rl.RetryAfter))
	}
}

// released hands an intent the runner released as kept to Kept.
func (r *Renewer) released(in intent.Intent) {
	if r.Kept != nil && in.State == intent.Released && in.Outcome == intent.OutcomeKept && in.SandboxID != "" {
		go r.Kept(in)
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// startCensus checks, in a goroutine of its own, which renewed sandboxes
// were deleted behind tether's back: one list per owner label, then a read
// of each one the list did not show.
func (l *loop) startCensus(ctx context.Context) {
	byOwner := map[string][]entry{}
	for _, e := range l.entries {
		if !e.gone {
			byOwner[e.owner] = append(byOwner[e.owner], *e)
		}
	}
	if len(byOwner) == 0 {
		return
	}
	l.censusBusy = true
	go func() {
		vs := l.census(ctx, byOwner)
		select {
		case l.censuses <- vs:
		case <-ctx.Done():
		}
	}()
}

// census lists each owner's sandboxes and reads the renewed ones missing
// from the list. An intent without an owner label (none is journaled
// without one) has every sandbox read. A list that fails makes its
// sandboxes wait for the next census: a renewal too many is cheaper than a
// read per sandbox under a failing API. A hold (a 429, a spent quota) ends
// it at once: the rest waits for the next census, the renewals come first.
func (l *loop) census(ctx context.Context, byOwner map[string][]entry) []verdict {
	r := l.r
	var vs []verdict
	for owner, entries := range byOwner {
		if !l.held(provider.CallRead).IsZero() {
			return vs
		}
		listed := map[string]bool{}
		if owner != "" {
			sbs, err := r.Provider.List(ctx, map[string]string{intent.LabelOwner: owner})
			l.holdFor(err)
			if err != nil {
				r.log().Debug("lease census: cannot list the sandboxes; checking again in a lease", "owner", owner, "err", err)
				continue
			}
			for _, sb := range sbs {
				if !sb.Gone() && sb.State != provider.StateDestroying {
					listed[sb.ID] = true
				}
			}
		}
		for _, e := range entries {
			if listed[e.sandbox] || ctx.Err() != nil {
				continue
			}
			if !l.held(provider.CallRead).IsZero() {
				return vs
			}
			v := verdict{intent: e.intent, sandbox: e.sandbox}
			sb, err := r.Provider.Get(ctx, e.sandbox)
			l.holdFor(err)
			switch {
			case errors.Is(err, provider.ErrNotFound):
				v.notFound = true
			case err != nil:
				continue // no verdict: the next census asks again
			case sb.Gone() || sb.State == provider.StateDestroying:
				v.gone = true
			default:
				v.found = true
			}
			vs = append(vs, v)
		}
	}
	return vs
}

// judge takes in what a census found.
func (l *loop) judge(vs []verdict) {
	for _, v := range vs {
		e, ok := l.entries[v.intent]
		if !ok || e.sandbox != v.sandbox || e.gone {
			continue
		}
		switch {
		case v.found:
			e.missing = 0
		case v.notFound && e.missing == 0:
			e.missing++
		case v.gone, v.notFound:
			e.gone = true
			l.log.Warn("lease: the sandbox was deleted while its intent is live; no more renewals (the drain confirms it)", "intent", e.intent, "sandbox", e.sandbox)
		}
	}
}

// rescued is what one rescue came to.
type rescued struct {
	intent, sandbox string
	err             error
	skipped         bool // the intent is no longer observed with that sandbox
}

// rescueDue tries, for each sandbox whose renewals have failed until only
// rescueLeft of its lease is left, the one call that helps most: its
// auto-stop lengthened to the rescue's minutes, so Daytona does not stop
// it under the live runner. It waits for the hold to lift, as renewals do:
// inside a 429's window or a spent quota Daytona refuses it too, and each
// refused try would spend what the renewals need (sent regardless, the
// rescues of 20 sandboxes under a quota they just fit in stopped three of
// them). Then one at a time per sandbox, MinSpacing apart, until it
// succeeds or the lease has run out.
func (l *loop) rescueDue(ctx context.Context, now time.Time) {
	for _, e := range l.entries {
		end := e.lastOK.Add(l.r.Lease)
		if e.gone || e.rescued || now.Before(end.Add(-l.rescueLeft)) || !now.Before(end) || now.Before(e.rescueAt) {
			continue
		}
		if until := l.held(provider.CallSetter); !until.IsZero() {
			// A spent quota or a 429's window refuses the rescue too
			// (Daytona's throttlers refuse the organization): sent then,
			// it only spends what the renewals need. It goes when the
			// hold lifts, if the lease still lasts.
			e.rescueAt = until
			continue
		}
		e.rescueAt = now.Add(max(l.spacing, l.r.Lease)) // cleared when it comes back
		l.log.Error("lease about to run out: renewals keep failing; lengthening the sandbox's auto-stop so Daytona does not stop it under the live runner (after a host loss it would now run that long)",
			"intent", e.intent, "sandbox", e.sandbox, "last_renewed", now.Sub(e.lastOK).Round(time.Millisecond), "lease", l.r.Lease, "auto_stop_minutes", l.rescueMinutes)
		go func(e entry) {
			res := rescued{intent: e.intent, sandbox: e.sandbox}
			if in, err := l.r.Journal.Get(e.intent); err != nil || in.State != intent.Observed || in.SandboxID != e.sandbox {
				res.skipped = true
			} else {
				res.err = l.r.Provider.SetAutoStop(ctx, e.sandbox, l.rescueMinutes)
				l.holdFor(res.err)
			}
			select {
			case l.rescues <- res:
			case <-ctx.Done():
			}
		}(*e)
	}
}

// rescueSettled takes in what a rescue came to.
func (l *loop) rescueSettled(res rescued, now time.Time) {
	e, ok := l.entries[res.intent]
	if !ok || e.sandbox != res.sandbox || res.skipped {
		return
	}
	end := e.lastOK.Add(l.r.Lease)
	switch {
	case res.err == nil:
		e.rescued = true
		l.log.Error("lease rescued: the sandbox's auto-stop is lengthened until renewals succeed again; then its lease is set again",
			"intent", e.intent, "sandbox", e.sandbox, "auto_stop_minutes", l.rescueMinutes)
	default:
		// Tried again MinSpacing later, while the lease lasts.
		e.rescueAt = now.Add(l.spacing)
		l.log.Error("lease rescue failed: Daytona stops the sandbox at its first check after the lease unless a renewal or the rescue gets through first (it is not deleted: its auto-delete is the lease, counted from its stop)",
			"intent", e.intent, "sandbox", e.sandbox, "stops_after", end.Format(time.TimeOnly), "err", res.err)
	}
}

// restore gives a rescued sandbox its lease back (Renewer.Restore).
func (l *loop) restore(e *entry) {
	l.log.Warn("lease renewals succeed again; setting the rescued sandbox's lease again", "intent", e.intent, "sandbox", e.sandbox)
	if l.r.Restore == nil {
		return
	}
	in, err := l.r.Journal.Get(e.intent)
	if err != nil {
		return
	}
	go l.r.Restore(in)
}
