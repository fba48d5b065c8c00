package socket

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/intentapi"
	"github.com/tether-run/tether/journal"
)

// ParseListQuery reads a paged list's query string: limit, cursor, state
// (comma-separated, repeatable) and order (asc or desc). Anything else,
// or a bad value, is an error naming the parameter.
func ParseListQuery(v url.Values) (journal.PageQuery, error) {
	var q journal.PageQuery
	for name, vals := range v {
		switch name {
		case "limit":
			n, err := strconv.Atoi(vals[len(vals)-1])
			if err != nil || n < 1 || n > intent.MaxPageLimit {
				return q, fmt.Errorf("limit %q: want a whole number from 1 to %d", vals[len(vals)-1], intent.MaxPageLimit)
			}
			q.Limit = n
		case "cursor":
			q.After = vals[len(vals)-1]
			if err := intent.ValidateIntentID(q.After); err != nil {
				return q, fmt.Errorf("cursor %q: not a cursor this tether gave", truncateQuery(q.After))
			}
		case "state":
			for _, s := range vals {
				for _, st := range strings.Split(s, ",") {
					if st = strings.TrimSpace(st); st != "" {
						q.States = append(q.States, intent.State(st))
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
	return q, journal.ValidatePageQuery(q)
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
	out := intentapi.ListPage{Intents: make([]intentapi.Intent, len(p.Intents)), NextCursor: p.Next}
	for i, in := range p.Intents {
		out.Intents[i] = intentapi.View(in)
	}
	writeJSON(w, http.StatusOK, out)
}
