package daytona

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	apiclient "github.com/daytonaio/daytona/libs/api-client-go"

	"github.com/tether-run/tether/provider"
)

// sweepPageLimit is the page size of ListPage: the spec's maximum.
const sweepPageLimit = listPageLimit

var _ provider.Account = (*Provider)(nil)

// ListPage is one GET /sandbox of the account's sandboxes whose labels
// include every pair of q.Labels, in creation order (sort=createdAt,
// order=asc, so the pages stay stable while sandboxes are active), with
// includeErroredDeleted as q asks.
func (p *Provider) ListPage(ctx context.Context, q provider.AccountQuery, cursor string) ([]provider.Listed, string, error) {
	var filter string
	if len(q.Labels) > 0 {
		b, err := json.Marshal(q.Labels)
		if err != nil {
			return nil, "", fmt.Errorf("daytona list: labels: %w", err)
		}
		filter = string(b)
	}
	var page *apiclient.ListSandboxesResponse
	err := p.call(ctx, "list", filter, func(ctx context.Context) (*http.Response, error) {
		req := p.api.SandboxAPI.ListSandboxes(ctx).Limit(sweepPageLimit).
			Sort(apiclient.SANDBOXLISTSORTFIELD_CREATED_AT).Order(apiclient.SANDBOXLISTSORTDIRECTION_ASC)
		if filter != "" {
			req = req.Labels(filter)
		}
		if q.IncludeErroredDeleted {
			req = req.IncludeErroredDeleted(true)
		}
		if cursor != "" {
			req = req.Cursor(cursor)
		}
		var resp *http.Response
		var err error
		page, resp, err = req.Execute()
		return resp, err
	})
	if err != nil {
		return nil, "", err
	}
	out := make([]provider.Listed, 0, len(page.Items))
	for i := range page.Items {
		it := &page.Items[i]
		out = append(out, provider.Listed{
			Sandbox:         fromListItem(it),
			LastActivityAt:  parseTime(it.GetLastActivityAt()),
			DeleteRequested: it.GetDesiredState() == apiclient.SANDBOXDESIREDSTATE_DESTROYED,
		})
	}
	next := page.GetNextCursor()
	if next == cursor {
		next = "" // a server that repeats the cursor would loop the caller
	}
	return out, next, nil
}

// Inspect is Get with the last activity and whether a delete was accepted.
func (p *Provider) Inspect(ctx context.Context, id string) (provider.Listed, error) {
	sb, err := p.getByID(ctx, id)
	if err != nil {
		return provider.Listed{}, err
	}
	return provider.Listed{
		Sandbox:         fromSandbox(sb),
		LastActivityAt:  parseTime(sb.GetLastActivityAt()),
		DeleteRequested: sb.GetDesiredState() == apiclient.SANDBOXDESIREDSTATE_DESTROYED,
	}, nil
}
