package spooldir

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/tether-run/tether/spool"
)

// MaxFileSize bounds a spool file; anything larger is rejected unread.
const MaxFileSize = 64 << 10

// The ops of a spool file.
const (
	OpIntent  = "intent"
	OpObserve = "observe"
	OpRelease = "release"
	OpDelete  = "delete"
)

// FileOp is one spool file: one operation on the intent ID. For op "intent"
// ID is the id the writer chose ([a-z0-9_-]): the intent gets exactly that
// id, so the sandbox is named spool.NamePrefix+ID; later ops name it again.
type FileOp struct {
	Op        string            `json:"op"`
	ID        string            `json:"id"`
	Labels    map[string]string `json:"labels,omitempty"`
	OnDrain   spool.OnDrain     `json:"on_drain,omitempty"`
	SandboxID string            `json:"sandbox_id,omitempty"`
	Outcome   string            `json:"outcome,omitempty"`
}

// Decode parses and validates one spool file: exactly one JSON
// object, no unknown fields, only the fields its op takes.
func Decode(data []byte) (FileOp, error) {
	var f FileOp
	if len(data) > MaxFileSize {
		return FileOp{}, fmt.Errorf("file larger than %d bytes", MaxFileSize)
	}
	t := bytes.TrimSpace(data)
	if len(t) == 0 || t[0] != '{' {
		return FileOp{}, errors.New("want one JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(t))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &te):
			return FileOp{}, fmt.Errorf("%s: want a JSON %s, got %s", te.Field, te.Type, te.Value)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return FileOp{}, errors.New("malformed JSON: it ends too early (was the file renamed before it was fully written?)")
		default:
			return FileOp{}, fmt.Errorf("malformed JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
		}
	}
	if _, err := dec.Token(); err != io.EOF {
		return FileOp{}, errors.New("more than one JSON value")
	}
	if err := spool.ValidateIntentID(f.ID); err != nil {
		return FileOp{}, err
	}
	forbid := func(field string, set bool) error {
		if set {
			return fmt.Errorf("%s: not allowed with op %q", field, f.Op)
		}
		return nil
	}
	var err error
	switch f.Op {
	case OpIntent:
		err = errors.Join(forbid("sandbox_id", f.SandboxID != ""), forbid("outcome", f.Outcome != ""),
			spool.ValidateLabels(f.Labels), spool.ValidateOnDrain(f.OnDrain))
	case OpObserve:
		err = errors.Join(forbid("labels", f.Labels != nil), forbid("on_drain", f.OnDrain != ""), forbid("outcome", f.Outcome != ""),
			spool.ValidateSandboxID(f.SandboxID))
	case OpRelease:
		err = errors.Join(forbid("labels", f.Labels != nil), forbid("on_drain", f.OnDrain != ""), forbid("sandbox_id", f.SandboxID != ""),
			spool.ValidateOutcome(f.Outcome))
	case OpDelete:
		err = errors.Join(forbid("labels", f.Labels != nil), forbid("on_drain", f.OnDrain != ""), forbid("sandbox_id", f.SandboxID != ""),
			forbid("outcome", f.Outcome != ""))
	case "":
		err = errors.New("op: missing, want intent, observe, release or delete")
	default:
		err = fmt.Errorf("op %q: want intent, observe, release or delete", truncate(f.Op))
	}
	if err != nil {
		return FileOp{}, err
	}
	return f, nil
}

// truncate keeps error messages about hostile input short.
func truncate(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}
