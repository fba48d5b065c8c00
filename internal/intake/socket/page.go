package socket

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/tether-run/tether/spool"
)

// ListPage is the answer of GET /v1/intents with paging: one page, and the
// cursor of the next (empty on the last page). Without any query parameter
// the answer is the whole live list, {"intents":[...]}, as before paging.
type ListPage struct {
	Intents    []Intent `json:"intents"`
	NextCursor string   `json:"next_cursor,omitempty"`
}

// ListQuery is the query string of a paged GET /v1/intents.
type ListQuery struct {
	// Limit bounds the page (spool.DefaultPageLimit when 0, at most spool.MaxPageLimit).
	Limit int
	// Cursor is the previous page's NextCursor.
	Cursor string
	// States filters by state; empty means the live states.
	States []spool.State
	// Newest pages from the newest intent to the oldest (order=desc).
	Newest bool
}

// Values is the query string of q.
func (q ListQuery) Values() url.Values {
	v := url.Values{}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	} else {
		v.Set("limit", strconv.Itoa(spool.DefaultPageLimit))
	}
	if q.Cursor != "" {
		v.Set("cursor", q.Cursor)
	}
	if len(q.States) > 0 {
		s := make([]string, len(q.States))
		for i, st := range q.States {
			s[i] = string(st)
		}
		v.Set("state", strings.Join(s, ","))
	}
	if q.Newest {
		v.Set("order", "desc")
	}
	return v
}

// ParseListQuery reads a paged list's query string: limit, cursor, state
// (comma-separated, repeatable) and order (asc or desc). Anything else,
// or a bad value, is an error naming the parameter.
func ParseListQuery(v url.Values) (spool.PageQuery, error) {
	var q spool.PageQuery
	for name, vals := range v {
		switch name {
		case "limit":
			n, err := strconv.Atoi(vals[len(vals)-1])
			if err != nil || n < 1 || n > spool.MaxPageLimit {
				return q, fmt.Errorf("limit %q: want a whole number from 1 to %d", vals[len(vals)-1], spool.MaxPageLimit)
			}
			q.Limit = n
		case "cursor":
			q.After = vals[len(vals)-1]
			if err := spool.ValidateIntentID(q.After); err != nil {
				return q, fmt.Errorf("cursor %q: not a cursor this tether gave", truncateQuery(q.After))
			}
		case "state":
			for _, s := range vals {
				for _, st := range strings.Split(s, ",") {
					if st = strings.TrimSpace(st); st != "" {
						q.States = append(q.States, spool.State(st))
					}
				}
			}
		case "order":
			switch vals[len(vals)-1] {
			case "asc":
			case "desc":
				q.Reverse = true
			default:
				return q, fmt.Errorf("order %q: want asc or desc", truncateQuery(vals[len(vals)-1]))
			}
		default:
			return q, fmt.Errorf("unknown query parameter %q (limit, cursor, state, order)", truncateQuery(name))
		}
	}
	return q, spool.ValidatePageQuery(q)
}

func truncateQuery(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// listPage answers a GET /v1/intents that has a query string.
func (s *Server) listPage(w http.ResponseWriter, r *http.Request) {
	q, err := ParseListQuery(r.URL.Query())
	if err != nil {
		badRequest(w, err)
		return
	}
	p, err := s.Journal.ListPage(q)
	if err != nil {
		s.journalError(w, err)
		return
	}
	out := ListPage{Intents: make([]Intent, len(p.Intents)), NextCursor: p.Next}
	for i, in := range p.Intents {
		out.Intents[i] = View(in)
	}
	writeJSON(w, http.StatusOK, out)
}

// ListPage reads one page of intents (GET /v1/intents?limit=...).
func (c *Client) ListPage(ctx context.Context, q ListQuery) (ListPage, error) {
	var out ListPage
	return out, c.do(ctx, http.MethodGet, "/v1/intents?"+q.Values().Encode(), nil, &out)
}
