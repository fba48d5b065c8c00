package metrics

import (
	"context"
	"fmt"
	"time"

	"github.com/tether-run/tether/provider"
)

// Provider wraps p so that every call is counted and timed under p's name
// (the provider label). The wrapper keeps what p can do beyond the Provider
// interface, and only that: its rate-limit knowledge (provider.Throttled, provider.Quotas),
// its account listing (provider.Account), its start-up check
// (provider.Checker), the drain's hand-off (provider.HandOffer), and the calls callers look for
// by type — Daytona's leases and labels (provider.Leaser,
// provider.Labeler), E2B's shared names and timeouts (provider.NameSharer,
// SetTimeout) — so that the reaper takes the same paths with metrics as
// without.
func (m *Metrics) Provider(p provider.Provider) provider.Provider {
	w := &measured{p: p, m: m, name: providerLabel(p.Name())}
	ps := m.series(w.name)
	m.smu.Lock()
	for _, op := range Ops(p) {
		ps.addOp(m.set, op)
	}
	m.smu.Unlock()
	_, leaser := p.(provider.Leaser)
	_, labeler := p.(provider.Labeler)
	_, sharer := p.(provider.NameSharer)
	switch {
	case leaser && labeler:
		return &leasing{w}
	case sharer:
		return &sharing{w}
	}
	return w
}

// Ops are the calls measured of p: those of the Provider interface and of
// each optional interface p has. Their series are made, at 0, when p is
// wrapped.
func Ops(p provider.Provider) []string {
	ops := []string{"get", "get_by_name", "list", "delete", "stop", "set_autostop"}
	if _, ok := p.(provider.Checker); ok {
		ops = append(ops, "check")
	}
	if _, ok := p.(provider.Account); ok {
		ops = append(ops, "list_page", "inspect")
	}
	if _, ok := p.(provider.NameSharer); ok {
		ops = append(ops, "named")
	}
	if _, ok := p.(TimeoutSetter); ok {
		ops = append(ops, "set_timeout")
	}
	if _, ok := p.(provider.Leaser); ok {
		ops = append(ops, "renew", "set_autodelete")
	}
	if _, ok := p.(provider.HandOffer); ok {
		ops = append(ops, "hand_off")
	}
	if _, ok := p.(provider.Labeler); ok {
		ops = append(ops, "set_labels")
	}
	return ops
}

type measured struct {
	p    provider.Provider
	m    *Metrics
	name string // the provider label
}

var (
	_ provider.Provider     = (*measured)(nil)
	_ provider.Throttled    = (*measured)(nil)
	_ provider.Account      = (*measured)(nil)
	_ provider.AccountBound = (*measured)(nil)
	_ provider.SyncDeleter  = (*measured)(nil)
	_ provider.Restorable   = (*measured)(nil)
	_ provider.CallTimer    = (*measured)(nil)
	_ provider.Checker      = (*measured)(nil)
	_ provider.HandOffer    = (*measured)(nil)
	_ provider.Quotas       = (*measured)(nil)
)

func (w *measured) Name() string    { return w.p.Name() }
func (w *measured) Account() string { return w.p.Account() }

// record counts one call of op, started at start, and its latency.
func (w *measured) record(op string, start time.Time, err error) {
	w.m.recordCall(w.name, op, start, err)
}

func (w *measured) Get(ctx context.Context, id string) (provider.Sandbox, error) {
	start := time.Now()
	sb, err := w.p.Get(ctx, id)
	w.record("get", start, err)
	return sb, err
}

func (w *measured) GetByName(ctx context.Context, name string) (provider.Sandbox, error) {
	start := time.Now()
	sb, err := w.p.GetByName(ctx, name)
	w.record("get_by_name", start, err)
	return sb, err
}

func (w *measured) List(ctx context.Context, labels map[string]string) ([]provider.Sandbox, error) {
	start := time.Now()
	out, err := w.p.List(ctx, labels)
	w.record("list", start, err)
	return out, err
}

func (w *measured) Delete(ctx context.Context, id string) error {
	start := time.Now()
	err := w.p.Delete(ctx, id)
	w.record("delete", start, err)
	return err
}

func (w *measured) Stop(ctx context.Context, id string) error {
	start := time.Now()
	err := w.p.Stop(ctx, id)
	w.record("stop", start, err)
	return err
}

func (w *measured) SetAutoStop(ctx context.Context, id string, minutes int) error {
	start := time.Now()
	err := w.p.SetAutoStop(ctx, id, minutes)
	w.record("set_autostop", start, err)
	return err
}

func (w *measured) ExhaustedUntil(kind string) time.Time {
	if t, ok := w.p.(provider.Throttled); ok {
		return t.ExhaustedUntil(kind)
	}
	return time.Time{}
}

// Quota is the wrapped provider's name for the quota calls of kind
// count against; "" when it knows none.
func (w *measured) Quota(kind string) string {
	if q, ok := w.p.(provider.Quotas); ok {
		return q.Quota(kind)
	}
	return ""
}

// HandOff is the wrapped provider's hand-off, counted; ErrNoHandOff when
// it has none.
func (w *measured) HandOff(ctx context.Context, id string, stop bool) (string, error) {
	h, ok := w.p.(provider.HandOffer)
	if !ok {
		return "", provider.ErrNoHandOff
	}
	start := time.Now()
	what, err := h.HandOff(ctx, id, stop)
	w.record("hand_off", start, err)
	return what, err
}

func (w *measured) ListPage(ctx context.Context, q provider.AccountQuery, cursor string) ([]provider.Listed, string, error) {
	a, ok := w.p.(provider.Account)
	if !ok {
		return nil, "", fmt.Errorf("provider %s cannot list its account", w.p.Name())
	}
	start := time.Now()
	page, next, err := a.ListPage(ctx, q, cursor)
	w.record("list_page", start, err)
	return page, next, err
}

func (w *measured) Inspect(ctx context.Context, id string) (provider.Listed, error) {
	a, ok := w.p.(provider.Account)
	if !ok {
		return provider.Listed{}, fmt.Errorf("provider %s cannot list its account", w.p.Name())
	}
	start := time.Now()
	sb, err := a.Inspect(ctx, id)
	w.record("inspect", start, err)
	return sb, err
}

// Check is the wrapped provider's start-up check, counted; nil when it has
// none (as reaper.Precheck takes a provider without one).
func (w *measured) Check(ctx context.Context) error {
	c, ok := w.p.(provider.Checker)
	if !ok {
		return nil
	}
	start := time.Now()
	err := c.Check(ctx)
	w.record("check", start, err)
	return err
}

func (w *measured) NotFoundIsPerAccount() bool { return provider.NeedsAccount(w.p) }

func (w *measured) DeletesSynchronously() bool { return provider.DeletesSynchronously(w.p) }

func (w *measured) RestoresOutliveDeletes() bool          { return provider.RestoresOutliveDeletes(w.p) }
func (w *measured) CallTimeout(kind string) time.Duration { return provider.CallTimeout(w.p, kind) }

// sharing is a measured provider on which several sandboxes may carry one
// name and whose timeout tether sets (E2B).
type sharing struct{ *measured }

var _ provider.NameSharer = (*sharing)(nil)

func (w *sharing) Named(ctx context.Context, name string) ([]provider.Sandbox, error) {
	start := time.Now()
	out, err := w.p.(provider.NameSharer).Named(ctx, name)
	w.record("named", start, err)
	return out, err
}

// TimeoutSetter is a provider whose sandboxes end at a timeout tether sets
// (E2B's POST /sandboxes/{id}/timeout): the cap and its renewals.
type TimeoutSetter interface {
	SetTimeout(ctx context.Context, id string, d time.Duration) error
}

func (w *sharing) SetTimeout(ctx context.Context, id string, d time.Duration) error {
	t, ok := w.p.(TimeoutSetter)
	if !ok {
		return fmt.Errorf("provider %s has no timeout to set", w.p.Name())
	}
	start := time.Now()
	err := t.SetTimeout(ctx, id, d)
	w.record("set_timeout", start, err)
	return err
}
