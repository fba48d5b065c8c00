package metrics

import (
	"context"
	"fmt"
	"time"

	"github.com/tether-run/tether/provider"
)

var (
	_ provider.Leaser  = (*measured)(nil)
	_ provider.Labeler = (*measured)(nil)
)

// LeaseAtRisk counts one sandbox whose renewals keep failing.
func (m *Metrics) LeaseAtRisk() { m.atRisk.Inc() }

// Leased sets how many sandboxes tether renews.
func (m *Metrics) Leased(n int) { m.leased.Set(float64(n)) }

func (w *measured) leaser() (provider.Leaser, error) {
	l, ok := w.p.(provider.Leaser)
	if !ok {
		return nil, fmt.Errorf("provider %s cannot renew sandboxes", w.p.Name())
	}
	return l, nil
}

func (w *measured) SetAutoDelete(ctx context.Context, id string, minutes int) error {
	l, err := w.leaser()
	if err != nil {
		return err
	}
	start := time.Now()
	err = l.SetAutoDelete(ctx, id, minutes)
	w.m.observe("set_autodelete", start, err)
	return err
}

func (w *measured) Renew(ctx context.Context, id string) error {
	l, err := w.leaser()
	if err != nil {
		return err
	}
	start := time.Now()
	err = l.Renew(ctx, id)
	w.m.observe("renew", start, err)
	return err
}

func (w *measured) SetLabels(ctx context.Context, id string, labels map[string]string) error {
	l, ok := w.p.(provider.Labeler)
	if !ok {
		return fmt.Errorf("provider %s cannot set labels", w.p.Name())
	}
	start := time.Now()
	err := l.SetLabels(ctx, id, labels)
	w.m.observe("set_labels", start, err)
	return err
}
