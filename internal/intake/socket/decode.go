package socket

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/intentapi"
	"github.com/tether-run/tether/internal/jsonstrict"
)

// DecodeCreateRequest reads and validates a create body. The all-defaults
// request is the object {}; an empty body is refused, as a client that sent
// none most likely lost the body it meant (a shell variable that was
// empty), and a declaration without the labels it meant is worse than an
// error.
func DecodeCreateRequest(r io.Reader) (intentapi.CreateRequest, error) {
	var req intentapi.CreateRequest
	if err := decodeStrict(r, &req, false); err != nil {
		return intentapi.CreateRequest{}, err
	}
	if err := intent.ValidateLabels(req.Labels); err != nil {
		return intentapi.CreateRequest{}, err
	}
	if err := intent.ValidateOnDrain(req.OnDrain); err != nil {
		return intentapi.CreateRequest{}, err
	}
	if req.Key != "" {
		if err := intent.ValidateKey(req.Key); err != nil {
			return intentapi.CreateRequest{}, err
		}
	}
	if req.ID != "" {
		if err := intent.ValidateIntentID(req.ID); err != nil {
			return intentapi.CreateRequest{}, err
		}
	}
	return req, nil
}

// DecodeObserveRequest reads and validates an observe body.
func DecodeObserveRequest(r io.Reader) (intentapi.ObserveRequest, error) {
	var req intentapi.ObserveRequest
	if err := decodeStrict(r, &req, false); err != nil {
		return intentapi.ObserveRequest{}, err
	}
	if err := intent.ValidateSandboxID(req.SandboxID); err != nil {
		return intentapi.ObserveRequest{}, err
	}
	return req, nil
}

// DecodeReleaseRequest reads and validates a release body; an empty body
// means outcome deleted.
func DecodeReleaseRequest(r io.Reader) (intentapi.ReleaseRequest, error) {
	var req intentapi.ReleaseRequest
	if err := decodeStrict(r, &req, true); err != nil {
		return intentapi.ReleaseRequest{}, err
	}
	if err := intent.ValidateOutcome(req.Outcome); err != nil {
		return intentapi.ReleaseRequest{}, err
	}
	return req, nil
}

// errTooLarge marks a body over intentapi.MaxBody (413, not 400).
var errTooLarge = fmt.Errorf("body larger than %d bytes", intentapi.MaxBody)

// decodeStrict decodes exactly one JSON object with nothing after it, the
// jsonstrict way: exact field names, each once, valid UTF-8. The messages
// name the field.
func decodeStrict(r io.Reader, v any, emptyOK bool) error {
	data, err := io.ReadAll(io.LimitReader(r, intentapi.MaxBody+1))
	if err != nil {
		return fmt.Errorf("reading body: %w", err)
	}
	if len(data) > intentapi.MaxBody {
		return errTooLarge
	}
	if len(bytes.TrimSpace(data)) == 0 {
		if emptyOK {
			return nil
		}
		return errors.New("body: empty, want a JSON object ({} for all defaults)")
	}
	if t := bytes.TrimSpace(data); t[0] != '{' {
		return errors.New("body: want a JSON object")
	}
	if err := jsonstrict.Decode(data, v); err != nil {
		return fmt.Errorf("body: %w", err)
	}
	return nil
}
