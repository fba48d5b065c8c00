package daytona

import (
	"context"
	"net/http"

	"github.com/tether-run/tether/provider"
)

var _ provider.Leaser = (*Provider)(nil)

// SetAutoDelete sets the auto-delete interval: 0 deletes the sandbox as
// soon as it stops (Daytona's "ephemeral"), -1 never.
func (p *Provider) SetAutoDelete(ctx context.Context, id string, minutes int) error {
	if minutes < 0 {
		minutes = -1
	}
	return p.call(ctx, "autodelete", id, func(ctx context.Context) (*http.Response, error) {
		_, resp, err := p.api.SandboxAPI.SetAutoDeleteInterval(ctx, id, float32(minutes)).Execute()
		return resp, err
	})
}

// Renew is POST /sandbox/{id}/last-activity, the call Daytona's own proxy
// and SSH gateway make for traffic (apps/api/src/sandbox/controllers/
// sandbox.controller.ts:915-935 at v0.190.0). It needs no permission and
// counts against the `authenticated` rate limit. The server takes one per
// sandbox per 5 s and answers 201 to the others without doing anything;
// the one it takes reaches its auto-stop check within 10 s
// (sandbox-activity.service.ts:41-51, 75).
func (p *Provider) Renew(ctx context.Context, id string) error {
	return p.call(ctx, "renew", id, func(ctx context.Context) (*http.Response, error) {
		return p.api.SandboxAPI.UpdateLastActivity(ctx, id).Execute()
	})
}

var _ provider.HandOffer = (*Provider)(nil)

// HandOff leaves a sandbox to Daytona's own timers: auto-stop 1 minute
// and, unless the runner asked for a stop, auto-delete 0 (ephemeral). The
// auto-stop check runs every 10 s and stops a sandbox idle for its
// interval; an ephemeral one it deletes at once instead, and a stopped
// ephemeral one the auto-delete check deletes at its next run
// (apps/api/src/sandbox/managers/sandbox.manager.ts:97, 115-148, 250-277
// at v0.190.0). Both setters count against `authenticated`, not the
// `sandbox-lifecycle` throttler a delete waits for (throttlerOf). The
// auto-stop goes first: if only one call lands, the sandbox still stops.
func (p *Provider) HandOff(ctx context.Context, id string, stop bool) (string, error) {
	if err := p.SetAutoStop(ctx, id, handOffAutoStop); err != nil {
		return "", err
	}
	if stop {
		return "auto-stop 1 min", nil
	}
	if err := p.SetAutoDelete(ctx, id, 0); err != nil {
		return "auto-stop 1 min", err
	}
	return "auto-stop 1 min, auto-delete at once", nil
}

// handOffAutoStop is HandOff's auto-stop interval, in minutes: Daytona's
// shortest.
const handOffAutoStop = 1
