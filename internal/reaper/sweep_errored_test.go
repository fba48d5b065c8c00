package reaper_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/daytona"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// erroredReadable is Daytona as a server that still answers the read of a
// sandbox whose destroy ended in error (v0.190.0 answers 404 for it,
// sandbox.service.ts:1777-1783): after its delete the simulator holds the
// sandbox in `error`, and the read shows the simulator's own record.
type erroredReadable struct {
	*daytona.Provider
	srv *daytonatest.Server
	t   *testing.T
}

func (e erroredReadable) Delete(ctx context.Context, id string) error {
	err := e.Provider.Delete(ctx, id)
	if err == nil {
		if herr := e.srv.Hold(id, "error", 0); herr != nil {
			e.t.Error(herr)
		}
	}
	return err
}

func (e erroredReadable) Inspect(ctx context.Context, id string) (provider.Listed, error) {
	l, err := e.Provider.Inspect(ctx, id)
	if !errors.Is(err, provider.ErrNotFound) {
		return l, err
	}
	sb, ok := e.srv.Sandbox(id)
	if !ok || sb.State != "error" {
		return l, err
	}
	return provider.Listed{Sandbox: provider.Sandbox{ID: sb.ID, Name: sb.Name, Labels: sb.Labels, State: sb.State, CreatedAt: sb.CreatedAt},
		LastActivityAt: sb.LastActivityAt, DeleteRequested: sb.DesiredState == "destroyed"}, nil
}

// A stale sandbox whose destroy ended in error, read as such after the
// delete, is reported failed at once, saying so: it still exists, and
// polling it to the deadline would only say "not confirmed".
func TestSweepFailsAtOnceWhenTheReadShowsTheDestroyFailed(t *testing.T) {
	srv, b, r, sbs := sweepWorld(t, 1)
	r.Providers = provider.NewSet(erroredReadable{Provider: b.Provider, srv: srv, t: t})
	const deadline = 20 * time.Second
	ctx, cancel := context.WithTimeout(t.Context(), deadline)
	defer cancel()
	start := time.Now()
	rep, err := r.Sweep(ctx, staleRule, true)
	if !errors.Is(err, reaper.ErrSweepIncomplete) {
		t.Fatalf("sweep: %v, want incomplete", err)
	}
	if took := time.Since(start); took > deadline/2 {
		t.Errorf("the sweep took %s: it polled a sandbox whose destroy had failed", took)
	}
	if len(rep.Items) != 1 || rep.Items[0].Action != reaper.SweepFailed || !strings.Contains(rep.Items[0].Reason, "ended in state error") {
		t.Fatalf("items %+v: want one failed, its destroy ended in error", rep.Items)
	}
	if sb, _ := srv.Sandbox(sbs[0].ID); sb.State != "error" || sb.DesiredState != "destroyed" {
		t.Fatalf("the simulator shows %s/%s, the test meant error/destroyed", sb.State, sb.DesiredState)
	}
}
