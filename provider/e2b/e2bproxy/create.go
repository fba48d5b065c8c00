package e2bproxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/intake/apiproxy"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/e2b"
)

var errNoID = errors.New("no sandboxID in the answer")

// Fields the proxy reads or sets: the NewSandbox body's metadata and
// timeout (spec NewSandbox; handlers/sandbox_create.go:155-158), the
// timeout of /timeout, /connect and /resume (sandbox_timeout.go:37-49,
// sandbox_connect.go:46, sandbox_resume.go:61), the duration of
// /refreshes (sandbox_refresh.go:47-54). Every other field is forwarded as
// the runner sent it.
const (
	fieldMetadata = "metadata"
	fieldTimeout  = "timeout"
	fieldDuration = "duration"
)

// body is a JSON object taken apart only as far as the proxy needs: the
// top-level fields stay raw, so whatever the runner's SDK sends reaches
// E2B unchanged.
type body struct {
	fields map[string]json.RawMessage
	// field names the timeout: fieldTimeout, or fieldDuration.
	field    string
	metadata map[string]string // the runner's own (nil when none)
	// timeout is the one the runner asked for, in seconds; -1 when absent
	// or null (the server's default then applies: 15 s,
	// handlers/timeout_helper.go:18-39).
	timeout int64
}

// parseBody reads a body the proxy must rewrite. It refuses what E2B would
// refuse anyway in a way that would leave tether unable to label or cap
// the sandbox (not an object, metadata that is not an object of strings,
// a timeout that is not a number). An empty body is an empty object.
func parseBody(b []byte) (*body, error) { return parseTimed(b, fieldTimeout) }

// parseTimed is parseBody with the timeout in field.
func parseTimed(b []byte, field string) (*body, error) {
	c := &body{timeout: -1, field: field}
	if len(strings.TrimSpace(string(b))) == 0 {
		c.fields = map[string]json.RawMessage{}
		return c, nil
	}
	if err := json.Unmarshal(b, &c.fields); err != nil {
		return nil, fmt.Errorf("body: not a JSON object: %w", err)
	}
	if c.fields == nil {
		return nil, errors.New("body: not a JSON object")
	}
	if raw, ok := c.fields[fieldMetadata]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &c.metadata); err != nil {
			return nil, errors.New("metadata: must be an object of strings")
		}
	}
	if raw, ok := c.fields[field]; ok && !isNull(raw) {
		var f float64
		if err := json.Unmarshal(raw, &f); err != nil || f != math.Trunc(f) {
			return nil, fmt.Errorf("%s: must be a whole number of seconds", field)
		}
		// E2B reads it as an int32 (spec NewSandbox.timeout).
		c.timeout = int64(min(max(f, 0), math.MaxInt32))
	}
	return c, nil
}

func isNull(raw json.RawMessage) bool { return strings.TrimSpace(string(raw)) == "null" }

// capTimeout cuts the timeout to max (when max > 0 and the runner asked
// for longer) and returns the end the runner asked for, or the zero time
// when nothing was cut.
func (c *body) capTimeout(max time.Duration, now time.Time) time.Time {
	if max <= 0 || c.timeout < 0 {
		return time.Time{}
	}
	asked := time.Duration(c.timeout) * time.Second
	if asked <= max {
		return time.Time{}
	}
	c.fields[c.field] = json.RawMessage(fmt.Sprint(int64(math.Ceil(max.Seconds()))))
	return now.Add(asked)
}

func (c *body) encode() ([]byte, error) { return json.Marshal(c.fields) }

// create serves POST /sandboxes: a create the runner declared itself (over
// the socket or a spool file: its metadata names a live intent of this
// journal, with the intent's tether-name and every one of its labels)
// passes with only its timeout capped; any other — one carrying another
// journal's owner, or a copy of an ended intent's metadata, among them —
// is journaled first,
// rewritten with tether's metadata and the cap, forwarded, and its id
// journaled (apiproxy).
func (p *Proxy) create(w http.ResponseWriter, r *http.Request) {
	raw, ok := p.core.ReadCreate(w, r)
	if !ok {
		return
	}
	c, err := parseBody(raw)
	if err != nil {
		writeError(w, http.StatusBadRequest, "tether proxy: "+err.Error())
		return
	}
	if p.RunnerDeclared(c.metadata, c.metadata[e2b.MetadataName]) {
		end := c.capTimeout(p.MaxTimeout, time.Now())
		if !end.IsZero() {
			if raw, err = c.encode(); err != nil {
				writeError(w, http.StatusInternalServerError, "tether proxy: "+err.Error())
				return
			}
			p.capped(c.metadata[intent.LabelIntent], end)
		}
		p.core.PassBody(w, r, raw)
		return
	}
	p.core.Create(w, r, apiproxy.Create{
		Account: p.accountOf(r.Header),
		Rewrite: func(in intent.Intent) ([]byte, error) { return p.rewrite(c, in) },
		Settle:  p.vouch,
	})
}

// vouch vouches for the sandbox a create or fork answered: the intent's
// name and labels are the metadata the proxy sent (or, for a fork, the
// parent's, which the fork carries).
func (p *Proxy) vouch(_ context.Context, in intent.Intent, id string, _ []byte) {
	if p.Vouch == nil {
		return
	}
	in.SandboxID = id
	labels := intent.MergeLabels(in.Labels, map[string]string{e2b.MetadataName: in.Name})
	if in.ParentIntent != "" {
		labels[intent.LabelIntent] = in.ParentIntent
	}
	sb := provider.Sandbox{ID: id, Name: in.Name, Labels: labels, State: provider.StateStarted}
	if err := p.Vouch(in, sb); err != nil {
		p.Logger.Debug("e2b proxy: the sandbox is not vouched for; the drain reads it first", "intent", in.ID, "sandbox", id, "why", err)
	}
}

// rewrite is the body forwarded for intent in: the runner's, with tether's
// metadata beside the runner's (tether's keys win a clash) and the cap.
func (p *Proxy) rewrite(c *body, in intent.Intent) ([]byte, error) {
	md := make(map[string]string, len(c.metadata)+len(in.Labels)+1)
	for k, v := range c.metadata {
		md[k] = v
	}
	ours := intent.MergeLabels(in.Labels, map[string]string{e2b.MetadataName: in.Name})
	var clash []string
	for k, v := range ours {
		if old, ok := md[k]; ok && old != v {
			clash = append(clash, k)
		}
		md[k] = v
	}
	if len(clash) > 0 {
		sort.Strings(clash)
		p.Logger.Warn("e2b proxy: the runner's metadata clashes with tether's keys; tether's are kept", "intent", in.ID, "keys", strings.Join(clash, ","))
	}
	b, err := json.Marshal(md)
	if err != nil {
		return nil, err
	}
	c.fields[fieldMetadata] = b
	if end := c.capTimeout(p.MaxTimeout, time.Now()); !end.IsZero() {
		p.capped(in.ID, end)
	}
	return c.encode()
}

// capTimeout serves the calls that set a sandbox's timeout (POST
// /sandboxes/{id}/timeout, /connect, /resume; /refreshes with its
// duration): one longer than MaxTimeout is cut to it, and the end the
// runner asked for is kept for the renewals.
func (p *Proxy) capTimeout(w http.ResponseWriter, r *http.Request, id, field string) {
	raw, ok := p.core.ReadCreate(w, r)
	if !ok {
		return
	}
	c, err := parseTimed(raw, field)
	if err != nil {
		// Not tether's to judge: E2B answers it as it would.
		p.core.PassBody(w, r, raw)
		return
	}
	if end := c.capTimeout(p.MaxTimeout, time.Now()); !end.IsZero() {
		if raw, err = c.encode(); err != nil {
			writeError(w, http.StatusInternalServerError, "tether proxy: "+err.Error())
			return
		}
		p.capped(p.core.IntentFor(p.accountOf(r.Header), id), end)
	}
	p.core.PassBody(w, r, raw)
}

func (p *Proxy) capped(intentID string, end time.Time) {
	p.Logger.Info("e2b proxy: timeout capped; tether renews it while the runner lives", "intent", intentID, "max", p.MaxTimeout, "asked_end", end.Format(time.RFC3339))
	if intentID != "" && p.Capped != nil {
		p.Capped(intentID, end)
	}
}
