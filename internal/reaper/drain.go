package reaper

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tether-run/tether/internal/crashpoint"
	"github.com/tether-run/tether/spool"
)

// Item is one intent in a Report: what an operator needs to find it again.
type Item struct {
	Name      string
	ID        string
	SandboxID string
	State     spool.State
	LastError string
}

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
	Elapsed    time.Duration
}

// Live is the number of intents the drain left live.
func (rep Report) Live() int { return len(rep.Unresolved) }

// Write prints one summary line per state and one line per unresolved (and
// per foreign) intent.
func (rep Report) Write(w io.Writer) {
	fmt.Fprintf(w, "drain: %d intents in %s, %d left live\n", rep.Total, rep.Elapsed.Round(time.Millisecond), rep.Live())
	for _, l := range []struct {
		state spool.State
		n     int
	}{
		{spool.Gone, rep.Gone},
		{spool.Stopped, rep.Stopped},
		{spool.Released, rep.Released},
		{spool.NeverCreated, rep.NeverCreated},
		{spool.Foreign, len(rep.Foreign)},
		{"unresolved", len(rep.Unresolved)},
	} {
		fmt.Fprintf(w, "  %-14s %d\n", l.state, l.n)
	}
	for _, it := range rep.Unresolved {
		fmt.Fprintf(w, "  unresolved %s intent=%s sandbox=%s state=%s: %s\n", it.Name, it.ID, orNone(it.SandboxID), it.State, it.LastError)
	}
	for _, it := range rep.Foreign {
		fmt.Fprintf(w, "  foreign %s intent=%s sandbox=%s: %s\n", it.Name, it.ID, orNone(it.SandboxID), it.LastError)
	}
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (rep *Report) add(in spool.Intent, err error) {
	it := Item{Name: in.Name, ID: in.ID, SandboxID: in.SandboxID, State: in.State, LastError: in.LastError}
	if err != nil {
		it.LastError = err.Error()
	}
	switch {
	case in.Live():
		rep.Unresolved = append(rep.Unresolved, it)
	case in.State == spool.Gone:
		rep.Gone++
	case in.State == spool.Stopped:
		rep.Stopped++
	case in.State == spool.Released:
		rep.Released++
	case in.State == spool.NeverCreated:
		rep.NeverCreated++
	case in.State == spool.Foreign:
		rep.Foreign = append(rep.Foreign, it)
	default:
		it.LastError = "unknown state " + string(in.State)
		rep.Unresolved = append(rep.Unresolved, it)
	}
}

// progressQuietTicks is how many progress ticks without change pass
// silently before the drain says again where it stands.
const progressQuietTicks = 9

type outcome struct {
	in  spool.Intent
	err error
}

// Drain resolves every given intent, with at most Concurrency provider calls
// in flight, until each is terminal or ctx ends, and reports the outcome.
// Each intent is isolated: a hung call holds one call slot and its own
// intent, a failing intent waits out its backoff without holding a slot, and
// a panic in one is reported as that intent's error. A running drain logs
// its progress every ProgressInterval while something moves.
func (r *Reaper) Drain(ctx context.Context, intents []spool.Intent) Report {
	start := time.Now()
	log := r.log()
	results := make([]outcome, len(intents))
	var resolved atomic.Int64

	concurrency := orDefault(r.Concurrency, DefaultConcurrency)
	workers := min(concurrency*IntentsPerCall, len(intents))
	log.Info("drain started", "intents", len(intents), "concurrency", concurrency)
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range jobs {
				results[i] = r.resolveIsolated(ctx, intents[i])
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
				if n == last && quiet < progressQuietTicks {
					quiet++
					continue
				}
				last, quiet = n, 0
				log.Info("drain in progress", "resolved", n, "of", len(intents), "elapsed", time.Since(start).Round(time.Millisecond))
			}
		}
	}()

	for i := range intents {
		if ctx.Err() != nil {
			// Not tried: report the journal's view, without provider calls.
			results[i] = r.untried(ctx, intents[i])
			continue
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	close(stopProgress)
	<-progressDone

	var rep Report
	rep.Total = len(intents)
	for _, o := range results {
		rep.add(o.in, o.err)
	}
	rep.Elapsed = time.Since(start)
	log.Info("drain finished", "intents", rep.Total, "gone", rep.Gone, "stopped", rep.Stopped,
		"released", rep.Released, "never_created", rep.NeverCreated, "foreign", len(rep.Foreign),
		"unresolved", len(rep.Unresolved), "elapsed", rep.Elapsed.Round(time.Millisecond))
	for _, it := range rep.Unresolved {
		log.Warn("intent left live", "name", it.Name, "intent", it.ID, "sandbox", it.SandboxID, "state", it.State, "err", it.LastError)
	}
	return rep
}

func (r *Reaper) untried(ctx context.Context, in spool.Intent) outcome {
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
func (r *Reaper) resolveIsolated(ctx context.Context, in spool.Intent) (o outcome) {
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

// LiveJournal is what DrainLive reads: the journal's live intents.
type LiveJournal interface {
	Live() ([]spool.Intent, error)
}

// DrainLive resolves every live intent of j under one deadline, timeout,
// and writes the report to w (stderr, beside the logs): one line per
// state, one per intent left live, each prefixed "tether: ". It returns the
// report, and ErrUnresolved (wrapped) when intents were left live.
func (r *Reaper) DrainLive(ctx context.Context, j LiveJournal, timeout time.Duration, w io.Writer) (Report, error) {
	live, err := j.Live()
	if err != nil {
		return Report{}, fmt.Errorf("drain: read the journal: %w", err)
	}
	log := r.log()
	if len(live) == 0 {
		log.Debug("drain: no live intent; nothing to do")
		return Report{}, nil
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	log.Info("drain: resolving every live intent", "live", len(live), "deadline", timeout)
	rep := r.Drain(dctx, live)
	var b strings.Builder
	rep.Write(&b)
	for _, line := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
		fmt.Fprintln(w, "tether: "+line)
	}
	if rep.Live() > 0 {
		return rep, fmt.Errorf("drain: %d intents left live: %w", rep.Live(), ErrUnresolved)
	}
	return rep, nil
}

// Replay resolves the intents an earlier run left live (the boot replay),
// in the background of a new run. If ctx ends first (the child exited),
// it stops and the drain takes over what is left.
func (r *Reaper) Replay(ctx context.Context, left []spool.Intent) {
	if len(left) == 0 {
		return
	}
	log := r.log()
	log.Info("replay: resolving intents an earlier run left live", "live", len(left))
	crashpoint.Hit(crashpoint.ReplayStarted)
	rep := r.Drain(ctx, left)
	if ctx.Err() != nil {
		log.Info("replay: cut short by the end of the child; the drain takes over", "resolved", rep.Total-rep.Live(), "live", rep.Live())
		return
	}
	// Resolve has logged each intent it left live or found foreign.
	log.Info("replay: done", "gone", rep.Gone, "stopped", rep.Stopped, "never_created", rep.NeverCreated,
		"foreign", len(rep.Foreign), "unresolved", rep.Live(), "elapsed", rep.Elapsed.Round(time.Millisecond))
}
