// Package intentapi is the JSON of tether's intent API, as docs/protocol.md
// documents it: the request bodies, the intent and the other answers. The
// server (internal/intake/socket) and the client (intentapi/client) both
// speak it; a Go runner imports them to declare its sandboxes. What the
// server does with outside input (strict decoding, validation) stays with
// the server.
package intentapi

import (
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tether-run/tether/intent"
)

// MaxBody bounds a request body. The largest valid create request (64
// labels of 63+255 bytes) is about 21 KiB, so 64 KiB leaves room while
// keeping a hostile client from making tether buffer much.
const MaxBody = 64 << 10

// ReplayHeader, set to "true" on a 201, tells a client its create was a
// retry of an earlier one with the same key.
const ReplayHeader = "Tether-Idempotent-Replay"

// CreateRequest is the body of POST /v1/intents.
type CreateRequest struct {
	Labels  map[string]string `json:"labels,omitempty"`
	OnDrain intent.OnDrain    `json:"on_drain,omitempty"`
	Key     string            `json:"key,omitempty"`
	// Provider is the cloud the sandbox is created in ("daytona", the
	// default, or "e2b"); tether must have credentials for it.
	Provider string `json:"provider,omitempty"`
	// ID, if set, is the intent id the client chooses, as a spool file's
	// writer does: the sandbox name, "tether-" + ID, is known before the
	// answer, and the id is the handle of every later call. The same id
	// again returns that intent while it is live; once it has ended the id
	// is refused (409), as a name is never handed out twice. Empty: tether
	// picks a ULID.
	ID string `json:"id,omitempty"`
}

// ObserveRequest is the body of POST /v1/intents/{id}/observe.
type ObserveRequest struct {
	SandboxID string `json:"sandbox_id"`
}

// ReleaseRequest is the body of POST /v1/intents/{id}/release.
type ReleaseRequest struct {
	Outcome string `json:"outcome,omitempty"`
}

// Health is the answer of GET /v1/health.
type Health struct {
	Owner   string `json:"owner"`
	Version string `json:"version"`
	Live    int    `json:"live"`
}

// ErrorBody is every error answer; Intent is set when the intent is still
// live after a failed delete.
type ErrorBody struct {
	Error  string  `json:"error"`
	Intent *Intent `json:"intent,omitempty"`
}

// Intent is an intent as the wire contract shows it: the journal's record
// without what only tether needs (the account fingerprint, the runner's
// release outcome).
type Intent struct {
	ID        string            `json:"id"`
	Name      string            `json:"name"`
	Labels    map[string]string `json:"labels"`
	Provider  string            `json:"provider"`
	OnDrain   intent.OnDrain    `json:"on_drain"`
	State     intent.State      `json:"state"`
	SandboxID string            `json:"sandbox_id"`
	Key       string            `json:"key,omitempty"`
	Attempts  int               `json:"attempts,omitempty"`
	LastError string            `json:"last_error,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
	UpdatedAt time.Time         `json:"updated_at"`
}

// View is the wire form of a journaled intent.
func View(in intent.Intent) Intent {
	return Intent{
		ID: in.ID, Name: in.Name, Labels: in.Labels, Provider: in.Provider, OnDrain: in.OnDrain,
		State: in.State, SandboxID: in.SandboxID, Key: in.Key, Attempts: in.Attempts,
		LastError: in.LastError, CreatedAt: in.CreatedAt, UpdatedAt: in.UpdatedAt,
	}
}

// ListPage is the answer of GET /v1/intents with paging: one page, and the
// cursor of the next (empty on the last page). Without any query parameter
// the answer is the whole live list, {"intents":[...]}.
type ListPage struct {
	Intents    []Intent `json:"intents"`
	NextCursor string   `json:"next_cursor,omitempty"`
}

// ListQuery is the query string of a paged GET /v1/intents.
type ListQuery struct {
	// Limit bounds the page (intent.DefaultPageLimit when 0, at most intent.MaxPageLimit).
	Limit int
	// Cursor is the previous page's NextCursor.
	Cursor string
	// States filters by state; empty means the live states.
	States []intent.State
	// Newest pages from the newest intent to the oldest (order=desc).
	Newest bool
}

// Values is the query string of q.
func (q ListQuery) Values() url.Values {
	v := url.Values{}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	} else {
		v.Set("limit", strconv.Itoa(intent.DefaultPageLimit))
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
