package e2bproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
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
	fieldMetadata   = "metadata"
	fieldTimeout    = "timeout"
	fieldDuration   = "duration"
	fieldAutoResume = "autoResume"
)

// timedActions are the calls on one sandbox whose end the proxy follows,
// by the last segment of their path, with the body field that holds the
// time they ask for ("" for a pause, which ends the timeout).
var timedActions = map[string]string{
	"timeout": fieldTimeout, "connect": fieldTimeout, "resume": fieldTimeout,
	"refreshes": fieldDuration, "pause": "-",
}

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
	var err error
	if c.fields, err = apiproxy.Fields(b, true); err != nil {
		return nil, err
	}
	if _, err := apiproxy.Field(c.fields, fieldMetadata, &c.metadata); err != nil {
		return nil, errors.New("metadata: must be an object of strings")
	}
	var f float64
	if ok, err := apiproxy.Field(c.fields, field, &f); err != nil || ok && f != math.Trunc(f) {
		return nil, fmt.Errorf("%s: must be a whole number of seconds", field)
	} else if ok {
		// E2B reads it as an int32 (spec NewSandbox.timeout).
		c.timeout = int64(min(max(f, 0), math.MaxInt32))
	}
	return c, nil
}

// asked is the end the runner's body asks for from now: its timeout, or
// the server's default of 15 s when it gives none (handlers/
// timeout_helper.go:15-19, sandbox_refresh.go:47-55).
func (c *body) asked(now time.Time) time.Time {
	if c.timeout < 0 {
		return now.Add(e2bDefaultTimeout)
	}
	return now.Add(time.Duration(c.timeout) * time.Second)
}

// e2bDefaultTimeout is the server's timeout of a call that gives none.
const e2bDefaultTimeout = 15 * time.Second

// autoResumes reports whether the body asks for auto-resume
// (autoResume.enabled, spec/openapi.yml:444-456): traffic alone then
// resumes the sandbox once paused (handlers/sandbox_create.go:165-168).
func (c *body) autoResumes() bool {
	raw, ok := c.fields[fieldAutoResume]
	if !ok {
		return false
	}
	var ar struct {
		Enabled bool `json:"enabled"`
	}
	return json.Unmarshal(raw, &ar) == nil && ar.Enabled
}

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
		id := c.metadata[intent.LabelIntent]
		end := c.capTimeout(p.MaxTimeout, time.Now())
		if !end.IsZero() {
			if raw, err = c.encode(); err != nil {
				writeError(w, http.StatusInternalServerError, "tether proxy: "+err.Error())
				return
			}
			p.capped(id, end)
		}
		p.noteAutoResume(id, c.autoResumes())
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
	ours := intent.MergeLabels(in.Labels, map[string]string{e2b.MetadataName: in.Name})
	md, clash := apiproxy.OverRunners(c.metadata, ours)
	if len(clash) > 0 {
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
	p.noteAutoResume(in.ID, c.autoResumes())
	return c.encode()
}

// timed serves the calls that set the timeout of one sandbox (POST
// /sandboxes/{id}/timeout, /connect, /resume; /refreshes with its
// duration) and its pause. On a sandbox of ours a timeout longer than
// MaxTimeout is cut to it, and once E2B accepted the call the end the
// runner asked for is told to Asked: exactly, for /timeout, which may
// shorten (sandbox_timeout.go:46-52), a resume and a connect that resumed
// (201: end = now + timeout, sandbox_resume.go, sandbox_connect.go:
// 119-182), and a pause (its timeout ends); as a lengthening only for a
// connect of a running sandbox (200) and /refreshes, which never shorten
// (KeepAliveFor without allowShorter, sandbox_connect.go:68-73,
// sandbox_refresh.go:56). A sandbox tether does not own passes untouched.
func (p *Proxy) timed(w http.ResponseWriter, r *http.Request, id, action string) {
	in := p.core.IntentFor(p.accountOf(r.Header), id)
	if in == "" {
		p.core.Pass(w, r) // not ours: neither cut nor renewed
		return
	}
	if action == "pause" {
		p.core.PassThen(w, r, func(status int) {
			if status/100 == 2 {
				p.asked(in, time.Now(), true)
			}
		})
		return
	}
	raw, ok := p.core.ReadCreate(w, r)
	if !ok {
		return
	}
	c, err := parseTimed(raw, timedActions[action])
	if err != nil {
		// Not tether's to judge: E2B answers it as it would.
		p.core.PassBody(w, r, raw)
		return
	}
	now := time.Now()
	asked := c.asked(now)
	if end := c.capTimeout(p.MaxTimeout, now); !end.IsZero() {
		if raw, err = c.encode(); err != nil {
			writeError(w, http.StatusInternalServerError, "tether proxy: "+err.Error())
			return
		}
		p.Logger.Info("e2b proxy: timeout capped; tether renews it while the runner lives", "intent", in, "call", action, "max", p.MaxTimeout, "asked_end", end.Format(time.RFC3339))
	}
	r.Body = io.NopCloser(bytes.NewReader(raw))
	r.ContentLength = int64(len(raw))
	p.core.PassThen(w, r, func(status int) {
		if status/100 != 2 {
			return
		}
		exact := action == "timeout" || action == "resume" || action == "connect" && status == http.StatusCreated
		p.asked(in, asked, exact)
	})
}

// capped tells Asked of intent's sandbox, cut to MaxTimeout when made
// (create, fork), the end the runner asked for.
func (p *Proxy) capped(intentID string, end time.Time) {
	p.Logger.Info("e2b proxy: timeout capped; tether renews it while the runner lives", "intent", intentID, "max", p.MaxTimeout, "asked_end", end.Format(time.RFC3339))
	p.asked(intentID, end, true)
}

func (p *Proxy) asked(intentID string, end time.Time, exact bool) {
	if intentID != "" && p.Asked != nil {
		p.Asked(intentID, end, exact)
	}
}

// noteAutoResume remembers the intents whose sandbox traffic alone may
// resume (made with auto-resume, or forked from one, or from a sandbox
// whose settings are unknown): a restore of it may be in flight when the
// runner deletes it (kill).
func (p *Proxy) noteAutoResume(intentID string, on bool) {
	if !on || intentID == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.autoResume) >= maxRemembered {
		// Past the bound every delete is taken as racing a restore: the
		// drain's restore window is the cost, never a false gone.
		p.autoResumeFull = true
		return
	}
	if p.autoResume == nil {
		p.autoResume = map[string]bool{}
	}
	p.autoResume[intentID] = true
}

// maxRemembered bounds the intents the proxy remembers made with
// auto-resume.
const maxRemembered = 100_000

// mayRestore reports whether a restore of sandboxID, of intent intentID,
// may be in flight: a resume or connect of it through the proxy not yet
// answered, or one traffic alone may start (auto-resume).
func (p *Proxy) mayRestore(sandboxID, intentID string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.restoring[sandboxID] > 0 || p.autoResume[intentID] || p.autoResumeFull
}
