package daytonaproxy

import (
	"testing"

	apiclient "github.com/daytonaio/daytona/libs/api-client-go"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/provider"
)

// A label replacement of a sandbox tether keeps (released as kept under a
// lease, or stopped on purpose) keeps tether-keep=true; one of a sandbox
// released as deleted, or as kept outside lease mode, is the runner's own.
func TestLabelReplacementKeepsTheKeepLabel(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	w.p.Intake.Leases = map[string]int{w.p.ProviderName(): 2}
	w.p.LeaseMinutes = 2
	c := w.runner()
	replace := func(id string) map[string]string {
		t.Helper()
		if _, _, err := c.SandboxAPI.ReplaceLabels(ctx(t), id).SandboxLabels(*apiclient.NewSandboxLabels(map[string]string{"team": "z"})).Execute(); err != nil {
			t.Fatal(err)
		}
		rec, _ := w.sim.Sandbox(id)
		return rec.Labels
	}
	release := func(id, outcome string) {
		t.Helper()
		if _, err := w.j.Release(w.intentOf(id).ID, outcome); err != nil {
			t.Fatal(err)
		}
	}
	kept := w.create("", -1)
	release(kept, intent.OutcomeKept)
	if got := replace(kept); got[provider.LabelKeep] != "true" || got["team"] != "z" {
		t.Errorf("a sandbox released as kept under a lease, relabelled: %v, want the runner's and %s=true", got, provider.LabelKeep)
	}
	stopped := w.create("", -1)
	in := w.intentOf(stopped)
	for _, st := range []intent.State{intent.Releasing, intent.Stopped} {
		if _, err := w.j.Transition(in.ID, st, ""); err != nil {
			t.Fatal(err)
		}
	}
	if got := replace(stopped); got[provider.LabelKeep] != "true" {
		t.Errorf("a sandbox the drain stopped, relabelled: %v, want %s=true", got, provider.LabelKeep)
	}
	deleted := w.create("", -1)
	release(deleted, intent.OutcomeDeleted)
	if got := replace(deleted); len(got) != 1 || got["team"] != "z" {
		t.Errorf("a sandbox released as deleted, relabelled: %v, want the runner's alone", got)
	}
}
