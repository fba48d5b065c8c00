package sidecar

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/intake/e2bproxy"
	"github.com/tether-run/tether/internal/lease"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/e2b"
	"github.com/tether-run/tether/supervisor"
)

// E2B's backstop is its timeout: every sandbox ends by itself (killed, or
// paused when it was made with auto-pause) once its timeout runs out. A
// runner may ask for a long one (up to the team's maximum, a day on some
// tiers), so a sandbox of a host lost with tether would live that long.
// tether cuts every timeout to --e2b-max-timeout (the proxy in the create
// and the timeout-setting calls; the observe of a socket or spool intent),
// and, while the child lives, renews each cut sandbox up to the end its
// runner asked for: the runner sees the lifetime it asked for, and a host
// loss ends the sandbox within the cap.

// e2bRenewShare: a cut sandbox is renewed every quarter of the cap, so
// three renewals may fail in a row before it ends under a live runner.
const e2bRenewShare = 4

// e2bKeeper renews the sandboxes whose timeout tether cut.
type e2bKeeper struct {
	p   e2bTimeouts
	j   *journal.Journal
	max time.Duration
	sc  *Sidecar
	// obs is told how many sandboxes are renewed and when one's renewals
	// fail (metrics); nil without them.
	obs lease.Observer

	mu      sync.Mutex
	ends    map[string]time.Time // intent id → the end its runner asked for
	failing map[string]bool      // intent ids whose last renewal failed
}

// e2bTimeouts are the E2B calls the keeper makes (the E2B provider, counted
// with --metrics-addr).
type e2bTimeouts interface {
	Get(ctx context.Context, id string) (provider.Sandbox, error)
	SetTimeout(ctx context.Context, id string, d time.Duration) error
}

func (sc *Sidecar) openE2B() {
	if sc.providers.E2B == nil {
		return
	}
	k := &e2bKeeper{p: sc.providers.E2B, j: sc.journal, max: sc.cfg.E2BMaxTimeout, sc: sc,
		ends: map[string]time.Time{}, failing: map[string]bool{}}
	if sc.metrics != nil {
		k.obs = sc.metrics.Lease(e2b.ProviderName)
		for _, p := range append([]provider.Provider{sc.reaper.Provider}, sc.reaper.Others...) {
			if t, ok := p.(e2bTimeouts); ok && p != nil && p.Name() == e2b.ProviderName {
				k.p = t // the reaper's: counted
			}
		}
	}
	sc.e2b = k
}

// note records that intent's sandbox was cut, and the end asked for.
func (k *e2bKeeper) note(intentID string, end time.Time) {
	k.mu.Lock()
	k.ends[intentID] = end
	k.leasedLocked()
	k.mu.Unlock()
}

// leasedLocked tells the metrics how many sandboxes are renewed.
func (k *e2bKeeper) leasedLocked() {
	if k.obs != nil {
		k.obs.Leased(len(k.ends))
	}
}

// failed notes a failed renewal of intent id; the first of a run of them
// is one sandbox at risk: a quarter of the cap has passed since its last
// renewal, and three more failures end it under a live runner.
func (k *e2bKeeper) failed(id string) {
	k.mu.Lock()
	first := !k.failing[id]
	k.failing[id] = true
	k.mu.Unlock()
	if first && k.obs != nil {
		k.obs.LeaseAtRisk()
	}
}

// capObserved cuts the timeout of a newly observed sandbox of a socket or
// spool intent, once its metadata proves it the intent's. A failed read or
// cut is tried again (backoff, Retry-After) until ctx ends: a sandbox left
// with its long timeout would outlive a lost host by that much.
func (k *e2bKeeper) capObserved(ctx context.Context, in intent.Intent) {
	err := k.sc.reaper.OnObserved(ctx, in, func(in intent.Intent) error { return k.capOnce(ctx, in) })
	if err != nil {
		k.sc.log.Warn("e2b: timeout cap not applied", "intent", in.ID, "sandbox", in.SandboxID, "err", err)
	}
}

// capOnce reads the sandbox, checks it is the intent's, and cuts its
// timeout when it is longer than the cap.
func (k *e2bKeeper) capOnce(ctx context.Context, in intent.Intent) error {
	sb, err := k.p.Get(ctx, in.SandboxID)
	if err != nil {
		return fmt.Errorf("read the sandbox: %w", err)
	}
	// The reaper's own check (id, name, every label): as the backstop's
	// read does for Daytona, it also spares the drain a read of it.
	if err := k.sc.reaper.Vouch(in, sb); err != nil {
		return err // wraps reaper.ErrForeign when the metadata is not the intent's
	}
	// AutoStopMinutes is the time left, rounded up to a minute.
	left := time.Duration(sb.AutoStopMinutes) * time.Minute
	if sb.Stopped() || left <= k.max {
		return nil
	}
	if err := k.p.SetTimeout(ctx, sb.ID, k.max); err != nil {
		return fmt.Errorf("cut the timeout: %w", err)
	}
	k.note(in.ID, time.Now().Add(left))
	k.sc.log.Info("e2b: timeout capped; tether renews it while the runner lives", "intent", in.ID, "sandbox", sb.ID, "max", k.max)
	return nil
}

// actor renews every cut sandbox each quarter of the cap while the child
// runs.
func (k *e2bKeeper) actor() supervisor.Actor {
	ctx, stop := context.WithCancel(context.Background())
	a, _ := backgroundActor("e2b-renew", func() error {
		t := time.NewTicker(k.max / e2bRenewShare)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
				k.renew(ctx)
			}
		}
	}, stop)
	return a
}

// renew sets each cut sandbox's timeout to the cap again, or to the end
// its runner asked for when that comes sooner (then it is left to end).
func (k *e2bKeeper) renew(ctx context.Context) {
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
		in, err := k.j.Get(id)
		left := time.Until(end)
		if err != nil || !in.Live() || left <= 0 {
			k.forget(id)
			continue
		}
		if in.SandboxID == "" {
			continue // the create's answer is not journaled yet
		}
		want := min(k.max, left)
		cctx, cancel := context.WithTimeout(ctx, backstopTimeout)
		err = k.p.SetTimeout(cctx, in.SandboxID, want)
		cancel()
		switch {
		case err == nil && want < k.max:
			k.forget(id) // it ends when its runner asked
		case errors.Is(err, provider.ErrNotFound):
			k.forget(id) // killed, or paused: nothing to renew
		case err != nil:
			k.failed(id)
			k.sc.log.Warn("e2b: renewal failed; retried next period", "intent", id, "sandbox", in.SandboxID, "err", err)
		default:
			k.mu.Lock()
			delete(k.failing, id)
			k.mu.Unlock()
		}
	}
}

func (k *e2bKeeper) forget(id string) {
	k.mu.Lock()
	delete(k.ends, id)
	delete(k.failing, id)
	k.leasedLocked()
	k.mu.Unlock()
}

// e2bProxyActor starts listening with the E2B API proxy and records the
// URL the child gets as E2B_API_URL.
func (sc *Sidecar) e2bProxyActor() (supervisor.Actor, error) {
	in := sc.withLogger("e2b-proxy")
	// Lease mode is Daytona's: E2B's backstop is the timeout cap.
	in.Provider, in.Account, in.Lease = e2b.ProviderName, sc.providers.E2B.Account(), 0
	p := &e2bproxy.Proxy{
		Intake:     in,
		Upstream:   sc.providers.E2B.APIURL(),
		MaxTimeout: sc.cfg.E2BMaxTimeout,
		Capped:     sc.e2b.note,
		Vouch:      sc.reaper.Vouch,
	}
	l, err := p.Listen(sc.cfg.E2BProxyAddr)
	if err != nil {
		return supervisor.Actor{}, err
	}
	sc.e2bProxyURL = p.URL(l)
	sc.log.Debug("e2b proxy: serving; the child's E2B_API_URL points at it", "url", p.ShownURL(l)) // the secret is the child's alone
	execute, interrupt := p.Actor(l)
	return supervisor.Actor{Name: "e2b-proxy", Execute: execute, Interrupt: interrupt}, nil
}

// e2bActors are Listen's E2B actors: the renewals, and the proxy unless
// it is off. None without E2B credentials.
func (sc *Sidecar) e2bActors() ([]supervisor.Actor, error) {
	if sc.e2b == nil {
		return nil, nil
	}
	actors := []supervisor.Actor{sc.e2b.actor()}
	if sc.cfg.E2BProxy {
		a, err := sc.e2bProxyActor()
		if err != nil {
			return nil, err
		}
		actors = append(actors, a)
	}
	return actors, nil
}
