package daytona

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	apiclient "github.com/daytonaio/daytona/libs/api-client-go"

	"github.com/tether-run/tether/provider"
)

var _ provider.Account = (*Provider)(nil)

// ListPage is one GET /sandbox of the account's sandboxes whose labels
// include every pair of q.Labels, in creation order (sort=createdAt,
// order=asc, so the pages stay stable while sandboxes are active), with
// includeErroredDeleted as q asks.
func (p *Provider) ListPage(ctx context.Context, q provider.AccountQuery, cursor string) ([]provider.Listed, string, error) {
	items, next, err := p.listPage(ctx, listQuery{labels: q.Labels, oldestFirst: true, erroredDeleted: q.IncludeErroredDeleted}, cursor)
	if err != nil {
		return nil, "", err
	}
	out := make([]provider.Listed, 0, len(items))
	for i := range items {
		it := &items[i]
		out = append(out, provider.Listed{
			Sandbox:         fromListItem(it),
			LastActivityAt:  parseTime(it.GetLastActivityAt()),
			DeleteRequested: it.GetDesiredState() == apiclient.SANDBOXDESIREDSTATE_DESTROYED,
		})
	}
	return out, next, nil
}

// listQuery is what one page of GET /sandbox/paginated asks for.
type listQuery struct {
	labels     map[string]string // every pair must match
	namePrefix string
	// oldestFirst sorts by creation, oldest first (sort=createdAt,
	// order=asc), so the pages stay stable while sandboxes are active.
	oldestFirst    bool
	erroredDeleted bool // includeErroredDeleted
}

// listPage asks for the page of q after cursor. next is "" on the last
// page, and also when the server repeats the cursor (which would loop the
// caller).
func (p *Provider) listPage(ctx context.Context, q listQuery, cursor string) (items []apiclient.SandboxListItem, next string, err error) {
	var filter string
	if len(q.labels) > 0 {
		b, err := json.Marshal(q.labels)
		if err != nil {
			return nil, "", fmt.Errorf("daytona list: labels: %w", err)
		}
		filter = string(b)
	}
	var page *apiclient.ListSandboxesResponse
	err = p.call(ctx, "list", filter, func(ctx context.Context) (*http.Response, error) {
		req := p.api.SandboxAPI.ListSandboxes(ctx).Limit(listPageLimit)
		if q.oldestFirst {
			req = req.Sort(apiclient.SANDBOXLISTSORTFIELD_CREATED_AT).Order(apiclient.SANDBOXLISTSORTDIRECTION_ASC)
		}
		if filter != "" {
			req = req.Labels(filter)
		}
		if q.namePrefix != "" {
			req = req.Name(q.namePrefix)
		}
		if q.erroredDeleted {
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
	next = page.GetNextCursor()
	if next == cursor {
		next = ""
	}
	return page.Items, next, nil
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
