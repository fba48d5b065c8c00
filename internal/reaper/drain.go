package reaper

// Drain, Replay and DrainLive: many intents resolved in parallel under one
// deadline (forks before their parents), and the Report of what is left,
// by provider.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/crashpoint"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider"
)

// Item is one intent in a Report: what an operator needs to find it again.
type Item struct {
	Name      string
	ID        string
	SandboxID string
	State     intent.State
	LastError string
}

// DefaultReportLines bounds the intents a report lists by name, per kind
// (unresolved, foreign): with thousands left live, the report gives counts
// and the first few; `tether intent ls` lists every live intent.
const DefaultReportLines = 20

// Report is the outcome of a Drain: how many intents ended in each terminal
// state, and by name and id the ones left live or found foreign.
type Report struct {
	Total        int
	Gone         int
	Stopped      int
	Released     int
	NeverCreated int
	// Foreign intents are closed but their sandboxes are not ours: listed
	// with the reason, since each is either an attack, a bug, or a clash.
	Foreign []Item
	// Unresolved intents are still live in the journal, for the next boot
	// or an operator; LastError says why.
	Unresolved []Item
	// HandedOff counts the unresolved intents whose sandboxes the drain
	// left to the provider's own timers (HandedOff errors), and HandOffs
	// says what it set, by provider.
	HandedOff int
	HandOffs  map[string][]string
	// NotTried live intents were not looked at, because nothing could act
	// on any of them (NotTriedWhy says why: no provider); they are not in
	// Unresolved and stay live in the journal.
	NotTried    int
	NotTriedWhy string
	// StoppedEarly, when set, says why the drain ended before its deadline:
	// the only intents left could not resolve before it.
	StoppedEarly string
	Elapsed      time.Duration
	// ByProvider is the same by the provider each intent names ("" for
	// one that names none: the reaper's first provider's), NotTried apart:
	// the metrics' provider label.
	ByProvider map[string]Tally
}

// Tally is what a drain ended one provider's intents in.
type Tally struct {
	Gone, Stopped, Released, NeverCreated, Foreign int
	Live                                           int // left unresolved
	HandedOff                                      int // of Live: left to the provider's own timers
}

// Live is the number of intents the drain left live.
func (rep Report) Live() int { return len(rep.Unresolved) + rep.NotTried }

// Write is WriteLines with DefaultReportLines.
func (rep Report) Write(w io.Writer) { rep.WriteLines(w, DefaultReportLines) }

// WriteLines prints one summary line per state, then at most max lines
// naming unresolved intents and at most max naming foreign ones, each kind
// followed by how many more there are. max < 0 lists none by name.
func (rep Report) WriteLines(w io.Writer, max int) {
	if max < 0 {
		max = 0
	}
	fmt.Fprintf(w, "drain: %s in %s, %d left live\n", plural(rep.Total, "intent", "intents"), rep.Elapsed.Round(time.Millisecond), rep.Live())
	if rep.NotTried > 0 && rep.NotTried == rep.Total {
		// Nothing was tried: the counts per state would all be zero.
		fmt.Fprintf(w, "  not tried: %s; the intents stay live in the journal\n", rep.NotTriedWhy)
		return
	}
	for _, l := range []struct {
		state intent.State
		n     int
	}{
		{intent.Gone, rep.Gone},
		{intent.Stopped, rep.Stopped},
		{intent.Released, rep.Released},
		{intent.NeverCreated, rep.NeverCreated},
		{intent.Foreign, len(rep.Foreign)},
		{"unresolved", len(rep.Unresolved)},
	} {
		fmt.Fprintf(w, "  %-14s %d\n", l.state, l.n)
	}
	if rep.HandedOff > 0 {
		var set []string
		for _, name := range slices.Sorted(maps.Keys(rep.HandOffs)) {
			set = append(set, name+": "+strings.Join(rep.HandOffs[name], " or "))
		}
		fmt.Fprintf(w, "  %-14s %d of the unresolved: their delete could not be sent before the deadline; the provider ends them by itself (%s); they stay live in the journal for the replay, `tether drain` or the sweep\n",
			"handed off", rep.HandedOff, strings.Join(set, "; "))
	}
	if rep.NotTried > 0 {
		fmt.Fprintf(w, "  %-14s %d (%s)\n", "not tried", rep.NotTried, rep.NotTriedWhy)
	}
	if rep.StoppedEarly != "" {
		fmt.Fprintf(w, "  stopped early: %s\n", rep.StoppedEarly)
	}
	for i, it := range rep.Unresolved {
		if i == max {
			fmt.Fprintf(w, "  ... and %d more unresolved, not listed here (at most %d are); `tether intent ls` lists the live intents while tether runs\n", len(rep.Unresolved)-max, max)
			break
		}
		fmt.Fprintf(w, "  unresolved %s intent=%s sandbox=%s state=%s: %s\n", it.Name, it.ID, orNone(it.SandboxID), it.State, it.LastError)
	}
	for i, it := range rep.Foreign {
		if i == max {
			fmt.Fprintf(w, "  ... and %d more foreign, not listed here (at most %d are)\n", len(rep.Foreign)-max, max)
			break
		}
		fmt.Fprintf(w, "  foreign %s intent=%s sandbox=%s: %s\n", it.Name, it.ID, orNone(it.SandboxID), it.LastError)
	}
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (rep *Report) add(in intent.Intent, err error) {
	it := Item{Name: in.Name, ID: in.ID, SandboxID: in.SandboxID, State: in.State, LastError: in.LastError}
	if err != nil {
		it.LastError = err.Error()
	}
	if rep.ByProvider == nil {
		rep.ByProvider = map[string]Tally{}
	}
	t := rep.ByProvider[in.Provider]
	switch {
	case in.Live():
		rep.Unresolved = append(rep.Unresolved, it)
		t.Live++
		var ho *HandedOff
		if errors.As(err, &ho) {
			rep.HandedOff++
			t.HandedOff++
			if rep.HandOffs == nil {
				rep.HandOffs = map[string][]string{}
			}
			if !slices.Contains(rep.HandOffs[ho.Provider], ho.Set) {
				rep.HandOffs[ho.Provider] = append(rep.HandOffs[ho.Provider], ho.Set)
			}
		}
	case in.State == intent.Gone:
		rep.Gone++
		t.Gone++
	case in.State == intent.Stopped:
		rep.Stopped++
		t.Stopped++
	case in.State == intent.Released:
		rep.Released++
		t.Released++
	case in.State == intent.NeverCreated:
		rep.NeverCreated++
		t.NeverCreated++
	case in.State == intent.Foreign:
		rep.Foreign = append(rep.Foreign, it)
		t.Foreign++
	default:
		it.LastError = "unknown state " + string(in.State)
		rep.Unresolved = append(rep.Unresolved, it)
		t.Live++
	}
	rep.ByProvider[in.Provider] = t
}

// progressQuietTicks is how many progress ticks without change pass
// silently before the drain says again where it stands.
const progressQuietTicks = 9

type outcome struct {
	in  intent.Intent
	err error
	// skipped: a replay cut short never tried this intent; the drain that
	// follows reports it.
	skipped bool
}

// Drain resolves every given intent, with at most Concurrency provider calls
// in flight, until each is terminal or ctx ends, and reports the outcome.
// Each intent is isolated: a hung call holds one call slot and its own
// intent, a failing intent waits out its backoff without holding a slot, and
// a panic in one is reported as that intent's error. A running drain logs
// its progress every ProgressInterval while something moves, and one line
// per intent it leaves live.
func (r *Reaper) Drain(ctx context.Context, intents []intent.Intent) Report {
	return r.drain(ctx, intents, false)
}

// drain is Drain; a replay (the boot replay) stops at once when ctx ends,
// without reading what it did not try, and leaves the per-intent lines to
// the drain that takes over.
func (r *Reaper) drain(ctx context.Context, intents []intent.Intent, replay bool) Report {
	start := time.Now()
	log := r.log()
	results := make([]outcome, len(intents))
	var resolved atomic.Int64
	var dispatched atomic.Bool
	waits := &nameWaits{m: map[string]time.Time{}}
	ctx, stop := context.WithCancelCause(withDrainState(context.WithValue(ctx, nameWaitsKey{}, waits)))
	defer stop(nil)
	deadline, hasDeadline := ctx.Deadline()

	concurrency := orDefault(r.Concurrency, DefaultConcurrency)
	workers := min(concurrency*IntentsPerCall, len(intents))
	log.Info("drain started", "intents", len(intents), "concurrency", concurrency)
	jobs := make(chan int)
	var wg sync.WaitGroup
	wctx := withForkWait(ctx, intents)
	for range workers {
		wg.Go(func() {
			for i := range jobs {
				results[i] = r.resolveIsolated(wctx, intents[i])
				forkSettled(wctx, intents[i].ID)
				crashpoint.Hit(crashpoint.DrainResolved)
				if !results[i].in.Live() {
					resolved.Add(1)
				}
			}
		})
	}

	stopProgress := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		t := time.NewTicker(orDefault(r.ProgressInterval, DefaultProgressInterval))
		defer t.Stop()
		// Log when something moved, and now and then when nothing did (a
		// replay can wait a long time for names that never appear).
		last, quiet := int64(-1), 0
		for {
			select {
			case <-stopProgress:
				return
			case <-t.C:
				n := resolved.Load()
				waiting, firstClose, lastClose := waits.summary()
				left := int64(len(intents)) - n
				// Stop when every intent left waits for a name that, absent,
				// closes only after the deadline: nothing can finish before
				// it but a create that lands late, and NameWaitGrace has
				// given that its chance.
				horizon := orDefault(r.NeverCreatedHorizon, DefaultNeverCreatedHorizon)
				// The drain may stop early once only intents whose names,
				// absent, close after its deadline are left.
				mayStop := !replay && r.NameWaitGrace > 0 && hasDeadline && left > 0 && int64(waiting) == left && firstClose.After(deadline)
				if mayStop && dispatched.Load() && time.Since(start) >= r.NameWaitGrace {
					why := fmt.Sprintf("%s waiting for %s sandbox name to appear; absent, %s as never-created at %s (%s after %s declaration), after this drain's deadline (%s). "+
						"To close %s: run tether drain again after %s; or, if no create of %s can still land (the runner that sent it is gone), now, with a --never-created-after shorter than %s (declared %s ago)",
						plural(waiting, "intent was", "intents were"), pick(waiting, "its", "their"), pick(waiting, "it closes", "the first closes"),
						firstClose.Format(time.DateTime), horizonSetting(horizon), pick(waiting, "its", "the first one's"), deadline.Format(time.TimeOnly),
						pick(waiting, "it", "them"), lastClose.Format(time.DateTime), pick(waiting, "its", "theirs"),
						pick(waiting, "its age", "the youngest one's age"), time.Since(lastClose.Add(-horizon)).Round(time.Second))
					log.Info("drain: stopping early: " + why)
					stop(errStoppedEarly{why})
					return
				}
				if waiting > 0 && (n != last || quiet >= progressQuietTicks) {
					msg := fmt.Sprintf("drain: %s for %s sandbox name to appear; absent, %s as never-created at %s (%s after %s declaration)",
						plural(waiting, "intent waits", "intents wait"), pick(waiting, "its", "their"), pick(waiting, "it closes", "the last closes"),
						lastClose.Format(time.DateTime), horizonSetting(horizon), pick(waiting, "its", "the last one's"))
					if mayStop {
						msg += fmt.Sprintf("; that is after this drain's deadline (%s), so the drain stops", deadline.Format(time.TimeOnly))
						if rest := r.NameWaitGrace - time.Since(start); rest > 0 {
							msg += fmt.Sprintf(" in %s", rest.Round(time.Second))
						}
						msg += " unless a name appears, and says what to do"
					}
					log.Info(msg, "waiting", waiting, "first_closes", firstClose.Format(time.DateTime))
				}
				if n == last && quiet < progressQuietTicks {
					quiet++
					continue
				}
				last, quiet = n, 0
				until := "none"
				if hasDeadline {
					until = deadline.Format(time.TimeOnly)
				}
				log.Info("drain in progress", "resolved", n, "of", len(intents), "waiting_for_name", waiting, "elapsed", time.Since(start).Round(time.Millisecond), "deadline", until)
			}
		}
	}()

	for _, i := range forksFirst(intents) {
		if ctx.Err() != nil {
			if replay {
				results[i] = outcome{skipped: true}
				continue
			}
			// Not tried: report the journal's view, without provider calls.
			results[i] = r.untried(ctx, intents[i])
			continue
		}
		jobs <- i
	}
	close(jobs)
	dispatched.Store(true)
	wg.Wait()
	close(stopProgress)
	<-progressDone

	var rep Report
	for _, o := range results {
		if !o.skipped {
			rep.Total++
			rep.add(o.in, o.err)
		}
	}
	rep.Elapsed = time.Since(start)
	var early errStoppedEarly
	if errors.As(context.Cause(ctx), &early) {
		rep.StoppedEarly = early.why
	}
	log.Info("drain finished", "intents", rep.Total, "gone", rep.Gone, "stopped", rep.Stopped,
		"released", rep.Released, "never_created", rep.NeverCreated, "foreign", len(rep.Foreign),
		"unresolved", len(rep.Unresolved), "handed_off", rep.HandedOff, "elapsed", rep.Elapsed.Round(time.Millisecond))
	if replay && ctx.Err() != nil {
		return rep
	}
	// The one line per intent left live (Resolve says why only at debug
	// level, so an intent is not logged once per attempt and again here).
	for _, it := range rep.Unresolved {
		log.Warn("intent left live", "name", it.Name, "intent", it.ID, "sandbox", it.SandboxID, "state", it.State, "err", it.LastError)
	}
	return rep
}

// forksFirst is the order intents are handed to the workers: a fork before
// the sandbox it was forked from (deepest first), since Daytona refuses to
// delete a sandbox while its forks live (sandbox.service.ts:2020-2029), and
// otherwise as given. A parent's delete refused all the same is sent again
// once its forks are gone (destroy).
func forksFirst(intents []intent.Intent) []int {
	order := make([]int, len(intents))
	for i := range order {
		order[i] = i
	}
	parent := make(map[string]string)
	for _, in := range intents {
		if in.ParentIntent != "" {
			parent[in.ID] = in.ParentIntent
		}
	}
	if len(parent) == 0 {
		return order
	}
	depth := func(id string) int {
		d := 0
		// Bounded: a cycle (which the journal never makes) cannot spin.
		for p, ok := parent[id]; ok && d < len(parent); p, ok = parent[p] {
			d++
		}
		return d
	}
	depths := make([]int, len(intents))
	for i, in := range intents {
		depths[i] = depth(in.ID)
	}
	slices.SortStableFunc(order, func(a, b int) int { return depths[b] - depths[a] })
	return order
}

// nameWaits is, during one drain, the intents whose names have not
// appeared, each with when it closes as never-created. Resolve finds it in
// its context.
type nameWaits struct {
	mu sync.Mutex
	m  map[string]time.Time
}

type nameWaitsKey struct{}

// waiting records in, looked up and absent, or (zero closes) no longer so.
func (w *nameWaits) waiting(id string, closes time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if closes.IsZero() {
		delete(w.m, id)
	} else {
		w.m[id] = closes
	}
}

// summary is how many wait, the first and the last to close.
func (w *nameWaits) summary() (n int, first, last time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, t := range w.m {
		if first.IsZero() || t.Before(first) {
			first = t
		}
		if t.After(last) {
			last = t
		}
	}
	return len(w.m), first, last
}

// noteNameWait tells the drain running Resolve (if any) whether in waits
// for its name (closes: when it closes as never-created; zero: it does not).
func noteNameWait(ctx context.Context, id string, closes time.Time) {
	if w, ok := ctx.Value(nameWaitsKey{}).(*nameWaits); ok {
		w.waiting(id, closes)
	}
}

// errStoppedEarly is the cause of a drain stopped before its deadline.
type errStoppedEarly struct{ why string }

func (e errStoppedEarly) Error() string { return "drain stopped early: " + e.why }

// horizonSetting names the never-created horizon with its setting, so a
// reader knows what to change.
func horizonSetting(horizon time.Duration) string {
	return "--never-created-after " + horizon.String()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func pick(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func (r *Reaper) untried(ctx context.Context, in intent.Intent) outcome {
	if cur, err := r.Journal.Get(in.ID); err == nil {
		in = cur
	}
	if !in.Live() {
		return outcome{in: in}
	}
	return outcome{in: in, err: fmt.Errorf("not tried before the drain deadline: %w", ctx.Err())}
}

// resolveIsolated is Resolve with a panic turned into that intent's error,
// so one bad answer cannot abort the drain of the others.
func (r *Reaper) resolveIsolated(ctx context.Context, in intent.Intent) (o outcome) {
	defer func() {
		if p := recover(); p != nil {
			r.log().Error("panic while resolving intent", "intent", in.ID, "panic", p)
			o = outcome{in: in, err: fmt.Errorf("panic while resolving: %v", p)}
		}
	}()
	out, err := r.Resolve(ctx, in)
	return outcome{in: out, err: err}
}

// ErrUnresolved: a drain ended with intents still live. They stay in the
// journal, for the next boot, `tether drain`, or an operator.
var ErrUnresolved = errors.New("unresolved intents stay in the journal")

// LiveJournal is what DrainLive reads: the journal's live intents, and
// their number alone when there is nothing to resolve them with.
type LiveJournal interface {
	Live() ([]intent.Intent, error)
	LiveCount() (int, error)
	// Quarantined are the records the journal could not read: their
	// sandboxes, if any, cannot be resolved, so they count as left live.
	Quarantined() ([]journal.Quarantined, error)
	Owner() string
}

// noProviderWhy is why a drain without a provider tries nothing.
const noProviderWhy = "tether has no provider to delete with (no credentials); a run or `tether drain` with credentials resolves them"

// DrainLive resolves every live intent of j under one deadline, ctx's (the
// caller's one drain deadline), and writes the report to w (stderr, beside the logs), each line prefixed
// "tether: ": one line per state and at most ReportLines naming intents
// left live. Without a provider nothing can act on any intent, so none is
// read: the report is their number and one line saying why. It returns the
// report, and ErrUnresolved (wrapped) when intents were left live.
func (r *Reaper) DrainLive(ctx context.Context, j LiveJournal, w io.Writer) (Report, error) {
	log := r.log()
	var rep Report
	if r.Providers.Len() == 0 {
		n, err := j.LiveCount()
		if err != nil {
			return Report{}, fmt.Errorf("drain: read the journal: %w", err)
		}
		if n == 0 {
			return Report{}, r.reportQuarantined(j, w)
		}
		rep = Report{Total: n, NotTried: n, NotTriedWhy: noProviderWhy}
		log.Debug("drain: no provider; every live intent stays in the journal", "live", n)
	} else {
		live, err := j.Live()
		if err != nil {
			return Report{}, fmt.Errorf("drain: read the journal: %w", err)
		}
		if len(live) == 0 {
			log.Debug("drain: no live intent; nothing to do")
			return Report{}, r.reportQuarantined(j, w)
		}
		var left time.Duration
		if d, ok := ctx.Deadline(); ok {
			left = time.Until(d).Round(time.Millisecond)
		}
		log.Info("drain: resolving every live intent", "live", len(live), "deadline", left)
		rep = r.Drain(ctx, live)
	}
	var b strings.Builder
	rep.WriteLines(&b, orDefault(r.ReportLines, DefaultReportLines))
	for _, line := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
		fmt.Fprintln(w, "tether: "+line)
	}
	qerr := r.reportQuarantined(j, w)
	if rep.Live() > 0 {
		return rep, fmt.Errorf("drain: %s left live: %w", plural(rep.Live(), "intent", "intents"), ErrUnresolved)
	}
	return rep, qerr
}

// reportQuarantined adds the journal's quarantined records to the drain
// report on w, at most ReportLines of them by name, and returns
// ErrUnresolved (wrapped) when there are any: tether could not read them,
// so their sandboxes, if any, are not resolved.
func (r *Reaper) reportQuarantined(j LiveJournal, w io.Writer) error {
	qs, err := j.Quarantined()
	if err != nil {
		fmt.Fprintf(w, "tether: quarantine: cannot be read: %v\n", err)
		return nil
	}
	if len(qs) == 0 {
		return nil
	}
	fmt.Fprintf(w, "tether: quarantined: %s could not be read; a sandbox may exist for each (name below, label %s=%s): delete it by hand if so\n",
		plural(len(qs), "journal record", "journal records"), intent.LabelOwner, j.Owner())
	limit := orDefault(r.ReportLines, DefaultReportLines)
	for i, q := range qs {
		if i == limit {
			fmt.Fprintf(w, "tether: quarantined: ... and %d more\n", len(qs)-i)
			break
		}
		fmt.Fprintf(w, "tether: quarantined: %s  %s\n", q.Name(), q.Reason)
	}
	return fmt.Errorf("drain: %s: %w", plural(len(qs), "quarantined record", "quarantined records"), ErrUnresolved)
}

// Replay resolves the intents an earlier run left live (the boot replay),
// given by id as the journal held them before the child started, in the
// background of a new run. If ctx ends first (the child exited), it stops
// at once and the drain takes over what is left. Without a provider it
// reads none of them: it logs their number, once. It returns the replay's
// report (the zero Report when there was nothing to replay).
func (r *Reaper) Replay(ctx context.Context, left []string) Report {
	if len(left) == 0 {
		return Report{}
	}
	log := r.log()
	if r.Providers.Len() == 0 {
		log.Info("replay: intents an earlier run left live stay live: "+noProviderWhy, "live", len(left))
		return Report{Total: len(left)}
	}
	log.Info("replay: resolving intents an earlier run left live", "live", len(left))
	crashpoint.Hit(crashpoint.ReplayStarted)
	intents := make([]intent.Intent, len(left))
	for i, id := range left {
		intents[i] = intent.Intent{ID: id} // Resolve reads the rest from the journal
	}
	rep := r.drain(ctx, intents, true)
	if ctx.Err() != nil {
		log.Info("replay: cut short by the end of the child; the drain takes over", "resolved", rep.Total-rep.Live(), "not_tried", len(left)-rep.Total)
		return rep
	}
	log.Info("replay: done", "gone", rep.Gone, "stopped", rep.Stopped, "never_created", rep.NeverCreated,
		"foreign", len(rep.Foreign), "unresolved", rep.Live(), "elapsed", rep.Elapsed.Round(time.Millisecond))
	return rep
}

// ErrNothingDone: a command's provider check found the provider unusable
// (nothing answers its URL, or the setup is wrong) before it did anything.
var ErrNothingDone = errors.New("nothing was done")

// Precheck is what a command that has done nothing yet runs before its
// first provider call: the provider's own check (one cheap authenticated
// read), so that a URL nothing answers at (refused, a host that does not
// resolve) or a configuration error (credentials, certificates) fails in
// one call instead of being retried until the command's deadline. Other
// failures (5xx, a timeout) are left to the command's retries. It returns
// nil when p has no check.
func Precheck(ctx context.Context, p provider.Provider) error {
	c, ok := p.(provider.Checker)
	if !ok {
		return nil
	}
	err := c.Check(ctx)
	if err != nil && (errors.Is(err, provider.ErrUnreachable) || provider.ConfigError(err)) {
		return fmt.Errorf("%w: %w", ErrNothingDone, err)
	}
	return nil
}
