package metrics_test

import (
	"path/filepath"
	"testing"

	"github.com/tether-run/tether/internal/testutil"

	"github.com/tether-run/tether/internal/metrics"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// The counted provider keeps lease mode's calls (and counts them); the
// lease collectors show what the renewer reported.
func TestLeaseMetrics(t *testing.T) {
	j, err := journal.Open(filepath.Join(t.TempDir(), "journal.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	sim, prov := testutil.Daytona(t)
	sb, err := sim.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Name: "x"})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New(j, "test", "daytona", "e2b")
	l, ok := m.Provider(prov).(provider.Leaser)
	if !ok {
		t.Fatal("the counted provider cannot renew")
	}
	if err := l.Renew(t.Context(), sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := l.SetAutoDelete(t.Context(), sb.ID, 0); err != nil {
		t.Fatal(err)
	}
	m.Lease("daytona").Leased(7)
	m.Lease("daytona").LeaseAtRisk()
	fams := scrape(t, m.Handler())
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"tether_provider_calls_total", []string{"provider", "daytona", "op", "renew", "outcome", "ok"}, 1},
		{"tether_provider_calls_total", []string{"provider", "daytona", "op", "set_autodelete", "outcome", "ok"}, 1},
		{"tether_provider_calls_total", []string{"provider", "e2b"}, 0},
		{"tether_leased_sandboxes", []string{"provider", "daytona"}, 7},
		{"tether_leased_sandboxes", []string{"provider", "e2b"}, 0},
		{"tether_lease_at_risk_total", []string{"provider", "daytona"}, 1},
		{"tether_lease_at_risk_total", []string{"provider", "e2b"}, 0},
	} {
		if got := sum(fams, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if got, _ := sim.Sandbox(sb.ID); got.AutoDeleteInterval != 0 {
		t.Errorf("auto-delete %d, want 0", got.AutoDeleteInterval)
	}
}
