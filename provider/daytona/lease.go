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
