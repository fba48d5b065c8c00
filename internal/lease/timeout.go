package lease

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

// A provider whose every sandbox ends at a timeout (E2B: killed, or paused
// when it was made with auto-pause, once its timeout runs out) has its
// backstop built in, but a runner may ask for a long one (up to the team's
// maximum, a day on some tiers), so a sandbox of a host lost with tether
// would live that long. The timeout renewer keeps that bound short: every
// timeout is cut to Max (the proxy in the calls that set one; CapObserved
// for a sandbox declared over the socket or the spool), and, while the
// child lives, each cut sandbox is renewed up to the end its runner asked
// for: the runner sees the lifetime it asked for, and a host loss ends the
// sandbox within Max of its last renewal.

// TimeoutRenewShare: a cut sandbox is renewed every quarter of the cap, so
// three renewals may fail in a row before it ends under a live runner.
const TimeoutRenewShare = 4

// Timeouts are the calls the timeout renewer makes.
type Timeouts interface {
	Get(ctx context.Context, id string) (provider.Sandbox, error)
	SetTimeout(ctx context.Context, id string, d time.Duration) error
}

// Verifier proves a sandbox is an intent's before tether changes it: the
// reaper's check of id, name and every label (Vouch), and its retry of a
// step on a newly observed sandbox (RetryOnObserved: backoff, Retry-After, a
// mistyped id corrected by name).
type Verifier interface {
	Vouch(in intent.Intent, sb provider.Sandbox) error
	RetryOnObserved(ctx context.Context, in intent.Intent, once func(intent.Intent) error) error
}

// TimeoutRenewer cuts and renews the timeouts of one provider's sandboxes.
type TimeoutRenewer struct {
	Provider Timeouts
	Journal  interface {
		Get(id string) (intent.Intent, error)
	}
	Verifier Verifier
	// Max is the longest timeout a sandbox keeps.
	Max time.Duration
	// CallTimeout bounds each call.
	CallTimeout time.Duration
	// Recorder is told how many sandboxes are renewed and when one's
	// renewals fail (metrics); nil without them.
	Recorder Recorder
	Logger   *slog.Logger

	mu      sync.Mutex
	ends    map[string]time.Time // intent id → the end its runner asked for
	failing map[string]bool      // intent ids whose last renewal failed
}

func (k *TimeoutRenewer) log() *slog.Logger {
	if k.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return k.Logger
}

// Capped records that intent's sandbox was cut, and the end its runner
// asked for.
func (k *TimeoutRenewer) Capped(intentID string, end time.Time) { k.Asked(intentID, end, true) }

// Asked records the end a runner asked for its intent's sandbox (the
// proxy's hook, after each call that sets it): exact, the runner's new
// end, which may be sooner than the last (a /timeout that shortens, a
// resume, a pause: now); or only a lengthening (a connect of a running
// sandbox, a refresh), which never moves the end sooner. Renewals never
// go past the end recorded; one within Max from now needs none (the
// sandbox's own timeout is the runner's), so the sandbox is no longer
// renewed.
func (k *TimeoutRenewer) Asked(intentID string, end time.Time, exact bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ends == nil {
		k.ends, k.failing = map[string]time.Time{}, map[string]bool{}
	}
	if cur, ok := k.ends[intentID]; ok && !exact && cur.After(end) {
		end = cur
	}
	if time.Until(end) <= k.Max {
		delete(k.ends, intentID)
		delete(k.failing, intentID)
	} else {
		k.ends[intentID] = end
	}
	k.leasedLocked()
}

// leasedLocked tells the metrics how many sandboxes are renewed.
func (k *TimeoutRenewer) leasedLocked() {
	if k.Recorder != nil {
		k.Recorder.Leased(len(k.ends))
	}
}

// failed notes a failed renewal of intent id; the first of a run of them
// is one sandbox at risk: a quarter of the cap has passed since its last
// renewal, and three more failures end it under a live runner.
func (k *TimeoutRenewer) failed(id string) {
	k.mu.Lock()
	first := !k.failing[id]
	k.failing[id] = true
	k.mu.Unlock()
	if first && k.Recorder != nil {
		k.Recorder.LeaseAtRisk()
	}
}

// CapObserved cuts the timeout of a newly observed sandbox of a socket or
// spool intent, once a read proves it the intent's. A failed read or cut
// is tried again (backoff, Retry-After) until ctx ends: a sandbox left
// with its long timeout would outlive a lost host by that much.
func (k *TimeoutRenewer) CapObserved(ctx context.Context, in intent.Intent) {
	err := k.Verifier.RetryOnObserved(ctx, in, func(in intent.Intent) error { return k.capOnce(ctx, in) })
	if err != nil {
		k.log().Warn("timeout cap not applied", "intent", in.ID, "sandbox", in.SandboxID, "err", err)
	}
}

// capOnce reads the sandbox, checks it is the intent's, and cuts its
// timeout when it is longer than the cap.
func (k *TimeoutRenewer) capOnce(ctx context.Context, in intent.Intent) error {
	sb, err := k.Provider.Get(ctx, in.SandboxID)
	if err != nil {
		return fmt.Errorf("read the sandbox: %w", err)
	}
	// The reaper's own check (id, name, every label): it also spares the
	// drain a read of it.
	if err := k.Verifier.Vouch(in, sb); err != nil {
		return err // wraps reaper.ErrForeign when the metadata is not the intent's
	}
	// AutoStopMinutes is the time left, rounded up to a minute.
	left := time.Duration(sb.AutoStopMinutes) * time.Minute
	if sb.Stopped() || left <= k.Max {
		return nil
	}
	if err := k.Provider.SetTimeout(ctx, sb.ID, k.Max); err != nil {
		return fmt.Errorf("cut the timeout: %w", err)
	}
	k.Capped(in.ID, time.Now().Add(left))
	k.log().Info("timeout capped; tether renews it while the runner lives", "intent", in.ID, "sandbox", sb.ID, "max", k.Max)
	return nil
}

// Run renews every cut sandbox each quarter of the cap until ctx ends.
func (k *TimeoutRenewer) Run(ctx context.Context) error {
	t := time.NewTicker(k.Max / TimeoutRenewShare)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			k.Renew(ctx)
		}
	}
}

// Renew is one pass of the renewals (Run makes one every quarter of the
// cap): it sets each cut sandbox's timeout to the cap again, or to the end
// its runner asked for when that comes sooner (then it is left to end).
func (k *TimeoutRenewer) Renew(ctx context.Context) {
	k.mu.Lock()
	ends := make(map[string]time.Time, len(k.ends))
	for id, end := range k.ends {
		ends[id] = end
	}
	k.mu.Unlock()
	for id, end := range ends {
		if ctx.Err() != nil {
			return
		}
		in, err := k.Journal.Get(id)
		left := time.Until(end)
		if err == nil && in.State == intent.Released && in.Outcome == intent.OutcomeKept {
			// The runner keeps it: its own end, not the cap's.
			if err := k.HandBack(ctx, in); err != nil {
				k.log().Warn("the timeout of a sandbox released as kept is not handed back yet; tried again", "intent", id, "sandbox", in.SandboxID, "err", err)
			}
			continue
		}
		if err != nil || !in.Live() || left <= 0 {
			k.forget(id)
			continue
		}
		if in.SandboxID == "" {
			continue // the create's answer is not journaled yet
		}
		want := min(k.Max, left)
		cctx, cancel := context.WithTimeout(ctx, k.CallTimeout)
		err = k.Provider.SetTimeout(cctx, in.SandboxID, want)
		cancel()
		switch {
		case err == nil && want < k.Max:
			k.forget(id) // it ends when its runner asked
		case errors.Is(err, provider.ErrNotFound):
			k.forget(id) // killed, or paused: nothing to renew
		case err != nil:
			k.failed(id)
			k.log().Warn("renewal failed; retried next period", "intent", id, "sandbox", in.SandboxID, "err", err)
		default:
			k.mu.Lock()
			delete(k.failing, id)
			k.mu.Unlock()
		}
	}
}

// HandBack gives a sandbox its runner released as kept the end its runner
// last asked for, when tether cut it and it is still to come: kept, the
// sandbox is the runner's, and the cap would end it under the runner
// (E2B clamps the end to the team's maximum length). Renewals of it stop.
// Nothing to do for a sandbox tether did not cut (its timeout is the
// runner's), nor for one that is gone or paused (404), nor after a
// restart of tether, which forgets the ends asked for: that sandbox ends
// at the cap of its last renewal.
func (k *TimeoutRenewer) HandBack(ctx context.Context, in intent.Intent) error {
	k.mu.Lock()
	end, ok := k.ends[in.ID]
	k.mu.Unlock()
	left := time.Until(end)
	if !ok || in.SandboxID == "" || left <= 0 {
		k.forget(in.ID)
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, k.CallTimeout)
	err := k.Provider.SetTimeout(cctx, in.SandboxID, left)
	cancel()
	if err != nil && !errors.Is(err, provider.ErrNotFound) {
		return err
	}
	k.forget(in.ID)
	if err == nil {
		k.log().Info("released as kept: the sandbox gets back the end its runner asked for", "intent", in.ID, "sandbox", in.SandboxID, "ends", end.Format(time.RFC3339))
	}
	return nil
}

func (k *TimeoutRenewer) forget(id string) {
	k.mu.Lock()
	delete(k.ends, id)
	delete(k.failing, id)
	k.leasedLocked()
	k.mu.Unlock()
}
