package metrics

import (
	"context"
	"time"

	"github.com/tether-run/tether/provider"
)

// leasing is a measured provider with leases and labels (Daytona).
type leasing struct{ *measured }

var (
	_ provider.Leaser  = (*leasing)(nil)
	_ provider.Labeler = (*leasing)(nil)
)

func (w *leasing) SetAutoDelete(ctx context.Context, id string, minutes int) error {
	start := time.Now()
	err := w.p.(provider.Leaser).SetAutoDelete(ctx, id, minutes)
	w.record("set_autodelete", start, err)
	return err
}

func (w *leasing) Renew(ctx context.Context, id string) error {
	start := time.Now()
	err := w.p.(provider.Leaser).Renew(ctx, id)
	w.record("renew", start, err)
	return err
}

func (w *leasing) SetLabels(ctx context.Context, id string, labels map[string]string) error {
	start := time.Now()
	err := w.p.(provider.Labeler).SetLabels(ctx, id, labels)
	w.record("set_labels", start, err)
	return err
}

// Lease is what the renewals of one provider's sandboxes report (the
// lease.Recorder of lease mode's renewer, for Daytona; E2B's timeout
// renewals, for E2B).
type Lease struct {
	m    *Metrics
	name string
}

// Lease is the lease series of provider name.
func (m *Metrics) Lease(name string) Lease { return Lease{m: m, name: providerLabel(name)} }

// LeaseAtRisk counts one sandbox whose renewals keep failing.
func (l Lease) LeaseAtRisk() { l.m.series(l.name).atRisk.Inc() }

// Leased sets how many sandboxes tether renews.
func (l Lease) Leased(n int) { l.m.series(l.name).leased.Set(float64(n)) }
