package metrics

import (
	"context"
	"fmt"
	"time"

	"github.com/tether-run/tether/provider"
)

// Provider wraps p so that every call is counted and timed. The wrapper
// keeps what p can do beyond the Provider interface: its rate-limit
// knowledge (provider.Throttled) and its account listing (provider.Account).
func (m *Metrics) Provider(p provider.Provider) provider.Provider {
	return &measured{p: p, m: m}
}

type measured struct {
	p provider.Provider
	m *Metrics
}

var (
	_ provider.Provider  = (*measured)(nil)
	_ provider.Throttled = (*measured)(nil)
	_ provider.Account   = (*measured)(nil)
)

func (w *measured) Name() string    { return w.p.Name() }
func (w *measured) Account() string { return w.p.Account() }

func (w *measured) Get(ctx context.Context, id string) (provider.Sandbox, error) {
	start := time.Now()
	sb, err := w.p.Get(ctx, id)
	w.m.observe("get", start, err)
	return sb, err
}

func (w *measured) GetByName(ctx context.Context, name string) (provider.Sandbox, error) {
	start := time.Now()
	sb, err := w.p.GetByName(ctx, name)
	w.m.observe("get_by_name", start, err)
	return sb, err
}

func (w *measured) List(ctx context.Context, labels map[string]string) ([]provider.Sandbox, error) {
	start := time.Now()
	out, err := w.p.List(ctx, labels)
	w.m.observe("list", start, err)
	return out, err
}

func (w *measured) Delete(ctx context.Context, id string) error {
	start := time.Now()
	err := w.p.Delete(ctx, id)
	w.m.observe("delete", start, err)
	return err
}

func (w *measured) Stop(ctx context.Context, id string) error {
	start := time.Now()
	err := w.p.Stop(ctx, id)
	w.m.observe("stop", start, err)
	return err
}

func (w *measured) SetAutoStop(ctx context.Context, id string, minutes int) error {
	start := time.Now()
	err := w.p.SetAutoStop(ctx, id, minutes)
	w.m.observe("set_autostop", start, err)
	return err
}

func (w *measured) ExhaustedUntil(kind string) time.Time {
	if t, ok := w.p.(provider.Throttled); ok {
		return t.ExhaustedUntil(kind)
	}
	return time.Time{}
}

func (w *measured) ListPage(ctx context.Context, q provider.AccountQuery, cursor string) ([]provider.Listed, string, error) {
	a, ok := w.p.(provider.Account)
	if !ok {
		return nil, "", fmt.Errorf("provider %s cannot list its account", w.p.Name())
	}
	start := time.Now()
	page, next, err := a.ListPage(ctx, q, cursor)
	w.m.observe("list_page", start, err)
	return page, next, err
}

func (w *measured) Inspect(ctx context.Context, id string) (provider.Listed, error) {
	a, ok := w.p.(provider.Account)
	if !ok {
		return provider.Listed{}, fmt.Errorf("provider %s cannot list its account", w.p.Name())
	}
	start := time.Now()
	sb, err := a.Inspect(ctx, id)
	w.m.observe("inspect", start, err)
	return sb, err
}

func (w *measured) NotFoundIsPerAccount() bool { return provider.NeedsAccount(w.p) }

func (w *measured) DeletesSynchronously() bool { return provider.DeletesSynchronously(w.p) }
