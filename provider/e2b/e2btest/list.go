package e2btest

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// List paging (handlers/sandboxes_list.go:31-33): 100 by default and at
// most; the spec's request validator refuses a limit outside 1–100
// (utils/pagination.go:80-84).
const (
	listDefaultLimit = 100
	listMaxLimit     = 100
	// maxSandboxID is the first page's cursor id (utils/sandboxes_list.go:20).
	maxSandboxID = "zzzzzzzzzzzzzzzzzzzz"
)

// item is one sandbox of a list with its keyset position.
type item struct {
	listedJSON
	key time.Time // the start time on the microsecond grid (sandboxes_list.go:489-494)
}

// list is GET /v2/sandboxes (handlers/sandboxes_list.go:241-403): running
// sandboxes from the store, paused ones (pausing included) from their
// snapshots (a sandbox killed by its timeout whose snapshot stayed among
// them, and one being restored, which is in no store yet), filtered by state (both by default) and metadata, sorted by
// start time (newest first unless order=asc), then sandbox id, and paged:
// a full page carries X-Next-Token, the cursor of its last item.
func (s *Server) list(w http.ResponseWriter, r *http.Request, c *call) {
	q := r.URL.Query()
	states := []string{StateRunning, StatePaused}
	if v, ok := q["state"]; ok {
		states = nil
		for _, part := range strings.Split(strings.Join(v, ","), ",") {
			if part != StateRunning && part != StatePaused {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("Invalid state parameter: %q", part))
				return
			}
			states = append(states, part)
		}
	}
	asc := false
	if v := q.Get("order"); v != "" {
		switch v {
		case "asc":
			asc = true
		case "desc":
		default:
			writeError(w, http.StatusBadRequest, fmt.Sprintf("Invalid order parameter: unknown order %q", v))
			return
		}
	}
	limit := listDefaultLimit
	if v, ok := q["limit"]; ok {
		n, err := strconv.Atoi(v[0])
		if err != nil || n < 1 || n > listMaxLimit {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("Invalid limit %q: must be between 1 and %d", v[0], listMaxLimit))
			return
		}
		limit = n
	}
	// The first page starts after everything: at the real server's "now"
	// with the greatest id (utils/pagination.go:193-201), which no sandbox
	// has started after.
	first, cursorTime, cursorID := true, time.Time{}, maxSandboxID
	if tok := q.Get("nextToken"); tok != "" {
		first = false
		t, id, tokAsc, err := parseCursor(tok)
		if err != nil || tokAsc != asc {
			// utils/pagination.go:169-191, handlers/sandboxes_list.go:281-285.
			writeError(w, http.StatusBadRequest, "Invalid next token")
			return
		}
		cursorTime, cursorID = t.Truncate(time.Microsecond), id
	}
	var filter map[string]string
	if v, ok := q["metadata"]; ok {
		f, err := ParseMetadataFilter(v[0])
		if err != nil {
			writeError(w, http.StatusBadRequest, "Error parsing metadata")
			return
		}
		filter = f
	}

	s.Mu.Lock()
	now := s.Now()
	running, items := 0, []item{}
	for _, rec := range s.teamRecordsLocked(c.team, now) {
		var want bool
		switch {
		case !rec.visible():
		case rec.state == StateRunning:
			want = slices.Contains(states, StateRunning)
		default: // pausing, paused, or being restored while its snapshot is there
			want = slices.Contains(states, StatePaused)
		}
		if !want || !matches(rec.metadata, filter) {
			continue
		}
		if rec.state == StateRunning {
			running++
		}
		items = append(items, item{listedJSON: rec.listed(), key: rec.startedAt.Truncate(time.Microsecond)})
	}
	s.Mu.Unlock()

	if slices.Contains(states, StateRunning) {
		w.Header().Set("X-Total-Running", strconv.Itoa(running))
	}
	items = slices.DeleteFunc(items, func(it item) bool { return !first && !after(it, cursorTime, cursorID, asc) })
	slices.SortFunc(items, func(a, b item) int { return compare(a, b, asc) })
	if len(items) > limit {
		last := items[limit-1]
		w.Header().Set("X-Next-Token", cursor(last.key, last.SandboxID, asc))
		items = items[:limit]
	}
	out := make([]listedJSON, len(items))
	for i, it := range items {
		out[i] = it.listedJSON
	}
	writeJSON(w, http.StatusOK, out)
}

// after reports whether it comes after the cursor (utils/sandboxes_list.go:84-102).
func after(it item, t time.Time, id string, asc bool) bool {
	if asc {
		return it.key.After(t) || it.key.Equal(t) && it.SandboxID < id
	}
	return it.key.Before(t) || it.key.Equal(t) && it.SandboxID > id
}

// compare is the list's order (utils/sandboxes_list.go:110-126).
func compare(a, b item, asc bool) int {
	if !a.key.Equal(b.key) {
		if asc {
			return a.key.Compare(b.key)
		}
		return b.key.Compare(a.key)
	}
	if asc {
		return strings.Compare(b.SandboxID, a.SandboxID)
	}
	return strings.Compare(a.SandboxID, b.SandboxID)
}

// cursor is the real server's token: base64url of
// "<RFC3339Nano>__<id>", with "__asc" for ascending order
// (utils/pagination.go:18-28).
func cursor(t time.Time, id string, asc bool) string {
	c := t.Format(time.RFC3339Nano) + "__" + id
	if asc {
		c += "__asc"
	}
	return base64.URLEncoding.EncodeToString([]byte(c))
}

// parseCursor reads a token (utils/sandboxes_list.go:47-76).
func parseCursor(tok string) (time.Time, string, bool, error) {
	b, err := base64.URLEncoding.DecodeString(tok)
	if err != nil {
		return time.Time{}, "", false, err
	}
	parts := strings.Split(string(b), "__")
	if len(parts) < 2 || len(parts) > 3 {
		return time.Time{}, "", false, errors.New("invalid cursor format")
	}
	asc := false
	if len(parts) == 3 {
		if parts[2] != "asc" {
			return time.Time{}, "", false, errors.New("invalid sort direction in cursor")
		}
		asc = true
	}
	t, err := time.Parse(time.RFC3339Nano, parts[0])
	if err != nil {
		return time.Time{}, "", false, err
	}
	return t, parts[1], asc, nil
}

// ParseMetadataFilter reads the metadata query parameter as the real
// server does (utils/sandboxes_list.go:201-230), after the query itself
// was decoded: the whole value is unescaped once more, split into
// key=value pairs on & and =, and each key and value unescaped again. The
// SDKs encode each key and value before joining them and form-encode the
// result (js-sdk sandboxApi.ts:1853-1862), so that pairs survive.
func ParseMetadataFilter(query string) (map[string]string, error) {
	query, err := url.QueryUnescape(query)
	if err != nil {
		return nil, fmt.Errorf("error when unescaping query: %w", err)
	}
	filters := make(map[string]string)
	for filter := range strings.SplitSeq(query, "&") {
		parts := strings.Split(filter, "=")
		if len(parts) != 2 {
			return nil, errors.New("invalid key value pair in query")
		}
		key, err := url.QueryUnescape(parts[0])
		if err != nil {
			return nil, fmt.Errorf("error when unescaping key: %w", err)
		}
		value, err := url.QueryUnescape(parts[1])
		if err != nil {
			return nil, fmt.Errorf("error when unescaping value: %w", err)
		}
		filters[key] = value
	}
	return filters, nil
}

// matches reports whether md has every pair of filter
// (utils/sandboxes_list.go:168-199); a sandbox without metadata matches
// only no filter.
func matches(md, filter map[string]string) bool {
	if filter == nil {
		return true
	}
	if md == nil {
		return false
	}
	for k, v := range filter {
		if got, ok := md[k]; !ok || got != v {
			return false
		}
	}
	return true
}
