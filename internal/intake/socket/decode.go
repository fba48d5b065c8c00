package socket

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/tether-run/tether/internal/jsonstrict"
	"github.com/tether-run/tether/spool"
)

// MaxBody bounds a request body. The largest valid create request (64
// labels of 63+255 bytes) is about 21 KiB, so 64 KiB leaves room while
// keeping a hostile client from making tether buffer much.
const MaxBody = 64 << 10

// CreateRequest is the body of POST /v1/intents.
type CreateRequest struct {
	Labels  map[string]string `json:"labels,omitempty"`
	OnDrain spool.OnDrain     `json:"on_drain,omitempty"`
	Key     string            `json:"key,omitempty"`
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

// errorBody is every error answer; Intent is set when the intent is still
// live after a failed delete.
type errorBody struct {
	Error  string  `json:"error"`
	Intent *Intent `json:"intent,omitempty"`
}

// Intent is an intent as the wire contract shows it (docs/ARCHITECTURE.md):
// the journal's record without what only tether needs (the account
// fingerprint, the runner's release outcome).
type Intent struct {
	ID        string            `json:"id"`
	Name      string            `json:"name"`
	Labels    map[string]string `json:"labels"`
	Provider  string            `json:"provider"`
	OnDrain   spool.OnDrain     `json:"on_drain"`
	State     spool.State       `json:"state"`
	SandboxID string            `json:"sandbox_id"`
	Key       string            `json:"key,omitempty"`
	Attempts  int               `json:"attempts,omitempty"`
	LastError string            `json:"last_error,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
	UpdatedAt time.Time         `json:"updated_at"`
}

// View is the wire form of a journaled intent.
func View(in spool.Intent) Intent {
	return Intent{
		ID: in.ID, Name: in.Name, Labels: in.Labels, Provider: in.Provider, OnDrain: in.OnDrain,
		State: in.State, SandboxID: in.SandboxID, Key: in.Key, Attempts: in.Attempts,
		LastError: in.LastError, CreatedAt: in.CreatedAt, UpdatedAt: in.UpdatedAt,
	}
}

// DecodeCreateRequest reads and validates a create body. An empty body is
// the all-defaults request.
func DecodeCreateRequest(r io.Reader) (CreateRequest, error) {
	var req CreateRequest
	if err := decodeStrict(r, &req, true); err != nil {
		return CreateRequest{}, err
	}
	if err := spool.ValidateLabels(req.Labels); err != nil {
		return CreateRequest{}, err
	}
	if err := spool.ValidateOnDrain(req.OnDrain); err != nil {
		return CreateRequest{}, err
	}
	if req.Key != "" {
		if err := spool.ValidateKey(req.Key); err != nil {
			return CreateRequest{}, err
		}
	}
	return req, nil
}

// DecodeObserveRequest reads and validates an observe body.
func DecodeObserveRequest(r io.Reader) (ObserveRequest, error) {
	var req ObserveRequest
	if err := decodeStrict(r, &req, false); err != nil {
		return ObserveRequest{}, err
	}
	if err := spool.ValidateSandboxID(req.SandboxID); err != nil {
		return ObserveRequest{}, err
	}
	return req, nil
}

// DecodeReleaseRequest reads and validates a release body; an empty body
// means outcome deleted.
func DecodeReleaseRequest(r io.Reader) (ReleaseRequest, error) {
	var req ReleaseRequest
	if err := decodeStrict(r, &req, true); err != nil {
		return ReleaseRequest{}, err
	}
	if err := spool.ValidateOutcome(req.Outcome); err != nil {
		return ReleaseRequest{}, err
	}
	return req, nil
}

// errTooLarge marks a body over MaxBody (413, not 400).
var errTooLarge = fmt.Errorf("body larger than %d bytes", MaxBody)

// decodeStrict decodes exactly one JSON object with nothing after it, the
// jsonstrict way: exact field names, each once, valid UTF-8. The messages
// name the field.
func decodeStrict(r io.Reader, v any, emptyOK bool) error {
	data, err := io.ReadAll(io.LimitReader(r, MaxBody+1))
	if err != nil {
		return fmt.Errorf("reading body: %w", err)
	}
	if len(data) > MaxBody {
		return errTooLarge
	}
	if len(bytes.TrimSpace(data)) == 0 {
		if emptyOK {
			return nil
		}
		return errors.New("body: empty, want a JSON object")
	}
	if t := bytes.TrimSpace(data); t[0] != '{' {
		return errors.New("body: want a JSON object")
	}
	if err := jsonstrict.Decode(data, v); err != nil {
		return fmt.Errorf("body: %w", err)
	}
	return nil
}
