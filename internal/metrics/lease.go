package metrics

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tether-run/tether/provider"
)

var (
	_ provider.Leaser  = (*measured)(nil)
	_ provider.Labeler = (*measured)(nil)
)

// leaseMetrics are lease mode's (tether run --lease).
type leaseMetrics struct {
	atRisk prometheus.Counter
	leased prometheus.Gauge
}

func newLeaseMetrics() *leaseMetrics {
	return &leaseMetrics{
		atRisk: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tether_lease_at_risk_total",
			Help: "Lease mode: times a sandbox's renewals kept failing for a quarter of the lease; the provider may stop it under the live runner.",
		}),
		leased: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tether_leased_sandboxes",
			Help: "Lease mode: sandboxes whose leases tether renews now.",
		}),
	}
}

func (l *leaseMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{l.atRisk, l.leased}
}

// LeaseAtRisk counts one sandbox whose renewals keep failing.
func (m *Metrics) LeaseAtRisk() { m.lease.atRisk.Inc() }

// Leased sets how many sandboxes tether renews.
func (m *Metrics) Leased(n int) { m.lease.leased.Set(float64(n)) }

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
