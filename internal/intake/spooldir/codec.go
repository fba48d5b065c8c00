package spooldir

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/jsonstrict"
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
// id, so the sandbox is named intent.NamePrefix+ID; later ops name it again.
type FileOp struct {
	Op        string            `json:"op"`
	ID        string            `json:"id"`
	Labels    map[string]string `json:"labels,omitempty"`
	OnDrain   intent.OnDrain    `json:"on_drain,omitempty"`
	Provider  string            `json:"provider,omitempty"`
	SandboxID string            `json:"sandbox_id,omitempty"`
	Outcome   string            `json:"outcome,omitempty"`
}

// Decode parses and validates one spool file: exactly one JSON object,
// decoded strictly (jsonstrict: exact field names, each once, valid UTF-8),
// only the fields its op takes.
func Decode(data []byte) (FileOp, error) {
	var f FileOp
	if len(data) > MaxFileSize {
		return FileOp{}, fmt.Errorf("file larger than %d bytes", MaxFileSize)
	}
	t := bytes.TrimSpace(data)
	if len(t) == 0 || t[0] != '{' {
		return FileOp{}, errors.New("want one JSON object")
	}
	if err := jsonstrict.Decode(t, &f); err != nil {
		if errors.Is(err, jsonstrict.ErrTruncated) {
			return FileOp{}, fmt.Errorf("%w (was the file renamed before it was fully written?)", err)
		}
		return FileOp{}, err
	}
	if err := intent.ValidateIntentID(f.ID); err != nil {
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
			intent.ValidateLabels(f.Labels), intent.ValidateOnDrain(f.OnDrain))
	case OpObserve:
		err = errors.Join(forbid("labels", f.Labels != nil), forbid("on_drain", f.OnDrain != ""), forbid("outcome", f.Outcome != ""),
			forbid("provider", f.Provider != ""), intent.ValidateSandboxID(f.SandboxID))
	case OpRelease:
		err = errors.Join(forbid("labels", f.Labels != nil), forbid("on_drain", f.OnDrain != ""), forbid("sandbox_id", f.SandboxID != ""),
			forbid("provider", f.Provider != ""), intent.ValidateOutcome(f.Outcome))
	case OpDelete:
		err = errors.Join(forbid("labels", f.Labels != nil), forbid("on_drain", f.OnDrain != ""), forbid("sandbox_id", f.SandboxID != ""),
			forbid("outcome", f.Outcome != ""), forbid("provider", f.Provider != ""))
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
