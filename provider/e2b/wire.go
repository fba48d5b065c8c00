package e2b

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/internal/apicall"
)

// errorJSON is the body of every error answer
// (packages/shared/pkg/apierrors/apierrors.go:26-41).
type errorJSON struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// sandboxJSON is the answer to a create.
type sandboxJSON struct {
	SandboxID  string `json:"sandboxID"`
	TemplateID string `json:"templateID"`
}

// listedJSON is one sandbox of GET /v2/sandboxes.
type listedJSON struct {
	SandboxID  string            `json:"sandboxID"`
	TemplateID string            `json:"templateID"`
	StartedAt  time.Time         `json:"startedAt"`
	EndAt      time.Time         `json:"endAt"`
	Metadata   map[string]string `json:"metadata"`
	State      string            `json:"state"`
}

// detailJSON is GET /sandboxes/{id}.
type detailJSON struct {
	listedJSON
	Lifecycle *struct {
		OnTimeout string `json:"onTimeout"`
	} `json:"lifecycle"`
}

// E2B's states (spec SandboxState).
const (
	stateRunning = "running"
	statePaused  = "paused"
)

// sandbox is the provider's view: the name from MetadataName, the
// metadata as labels, running as started and paused as stopped (a paused
// sandbox keeps its snapshot, as a stopped Daytona one keeps its disk).
// AutoStopMinutes is the time left to a running sandbox's timeout, at
// least 1; 0 for a paused one, which has none.
func (l *listedJSON) sandbox(now time.Time) provider.Sandbox {
	sb := provider.Sandbox{
		ID:        l.SandboxID,
		Name:      l.Metadata[MetadataName],
		Labels:    l.Metadata,
		CreatedAt: l.StartedAt,
	}
	if sb.Labels == nil {
		sb.Labels = map[string]string{}
	}
	switch l.State {
	case stateRunning:
		sb.State = provider.StateStarted
		sb.AutoStopMinutes = minutesUntil(l.EndAt, now)
	case statePaused:
		sb.State = provider.StateStopped
	case "":
		sb.State = "unknown"
	default:
		sb.State = l.State
	}
	return sb
}

// minutesUntil is the whole minutes to end, rounded up, at least 1.
func minutesUntil(end, now time.Time) int {
	d := end.Sub(now)
	if d <= 0 {
		return 1
	}
	return int(min(math.Ceil(d.Minutes()), math.MaxInt32))
}

// rateLimit reads a 429: the limiter's Retry-After (whole seconds,
// packages/api/internal/middleware/ratelimit/ratelimit.go:137-139), else
// RateLimit-Reset when RateLimit-Remaining is 0. The concurrency limit's
// 429 on a create carries neither (orchestrator/create_instance.go:188-204):
// it lasts until one of the team's sandboxes ends.
func rateLimit(h http.Header, text string, now time.Time) *provider.RateLimitError {
	rl := &provider.RateLimitError{Limiter: "rate-limit"}
	if strings.Contains(text, "maximum number of concurrent") {
		rl.Limiter = "concurrency"
	}
	if d := apicall.RetryAfter(h.Get("Retry-After"), now); d > 0 {
		rl.RetryAfter = d
		return rl
	}
	if strings.TrimSpace(h.Get("RateLimit-Remaining")) == "0" {
		rl.RetryAfter = apicall.RetryAfter(h.Get("RateLimit-Reset"), now)
	}
	return rl
}

// patternOf is the route pattern the server keys a path's limit by (the
// gin route, without the method: ratelimit.go:87, 107).
func patternOf(path string) string {
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	if len(parts) >= 2 && parts[0] == "sandboxes" {
		parts[1] = ":sandboxID"
	}
	return "/" + strings.Join(parts, "/")
}

// noteQuota remembers, per route pattern, until when an answer said its
// quota is spent. A 429 says so in its Retry-After (whole seconds, at
// least 1: ratelimit.go:137-139), which is honoured. An allowed answer
// with RateLimit-Remaining: 0 says the team's bucket is empty, but a GCRA
// bucket (go-redis/redis_rate, ratelimit.go:108) takes the next request
// one emission interval later, not at RateLimit-Reset, which is when the
// whole burst is back (ratelimit.go:126-129: RateLimit-Limit is the
// burst, RateLimit-Reset the time to a full bucket, rounded up): the mark
// lasts Reset/Limit, about one interval. An answer with some remaining
// does not clear a mark: answers of one window arrive out of order, and
// the mark ends by itself.
func (p *Provider) noteQuota(path string, code int, h http.Header, now time.Time) {
	var d time.Duration
	if code == http.StatusTooManyRequests {
		d = apicall.RetryAfter(h.Get("Retry-After"), now)
		if d <= 0 && strings.TrimSpace(h.Get("RateLimit-Remaining")) == "0" {
			d = apicall.RetryAfter(h.Get("RateLimit-Reset"), now)
		}
	} else if strings.TrimSpace(h.Get("RateLimit-Remaining")) == "0" {
		d = apicall.RetryAfter(h.Get("RateLimit-Reset"), now)
		if burst, err := strconv.Atoi(strings.TrimSpace(h.Get("RateLimit-Limit"))); err == nil && burst > 1 {
			d /= time.Duration(burst)
		}
	}
	if d <= 0 {
		return
	}
	key := patternOf(path)
	p.mu.Lock()
	defer p.mu.Unlock()
	if until := now.Add(d); until.After(p.exhausted[key]) {
		p.exhausted[key] = until
	}
}

// patternFor is the route pattern a kind of call counts against: reads
// and deletes of one sandbox share /sandboxes/:sandboxID.
func patternFor(kind string) string {
	switch kind {
	case provider.CallStop:
		return "/sandboxes/:sandboxID/pause"
	case provider.CallSetter, provider.CallRenew:
		return "/sandboxes/:sandboxID/timeout"
	}
	return "/sandboxes/:sandboxID"
}

// Quota is the route pattern calls of this kind count against: a read
// and a kill spend one bucket.
func (p *Provider) Quota(kind string) string { return patternFor(kind) }

// ExhaustedUntil is when the quota of this kind of call is known to be
// available again (zero once that has passed, or when not known spent).
func (p *Provider) ExhaustedUntil(kind string) time.Time {
	key := patternFor(kind)
	p.mu.Lock()
	defer p.mu.Unlock()
	until, ok := p.exhausted[key]
	if ok && !time.Now().Before(until) {
		delete(p.exhausted, key)
		return time.Time{}
	}
	return until
}

// sweepPageLimit is the page size of ListPage: the server's maximum.
const sweepPageLimit = listPageLimit

// listed is the sweep's view. E2B reports no activity; a paused sandbox
// has had none since it was paused, when its endAt was set
// (packages/api/internal/handlers/sandboxes_list.go:441,
// handlers/sandbox_get.go:250), so that is its last activity. A running
// one's is unknown (zero): it ends by its own timeout anyway.
func (l *listedJSON) listed(now time.Time) provider.Listed {
	out := provider.Listed{Sandbox: l.sandbox(now)}
	if l.State == statePaused {
		out.LastActivityAt = l.EndAt
	}
	return out
}

// ListPage is one GET /v2/sandboxes of the team's running and paused
// sandboxes whose metadata includes every pair of q.Labels, oldest first
// (order=asc). E2B keeps no deleted sandbox to list (IncludeErroredDeleted
// changes nothing).
func (p *Provider) ListPage(ctx context.Context, q provider.AccountQuery, cursor string) ([]provider.Listed, string, error) {
	page, next, err := p.listPage(ctx, q.Labels, cursor, true)
	if err != nil {
		return nil, "", err
	}
	now := time.Now()
	out := make([]provider.Listed, 0, len(page))
	for i := range page {
		out = append(out, page[i].listed(now))
	}
	if next == cursor {
		next = "" // a server that repeats the cursor would loop the caller
	}
	return out, next, nil
}

// Inspect is Get as a Listed.
func (p *Provider) Inspect(ctx context.Context, id string) (provider.Listed, error) {
	d, err := p.detail(ctx, id)
	if err != nil {
		return provider.Listed{}, err
	}
	return d.listed(time.Now()), nil
}
