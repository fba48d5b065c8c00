package daytonaproxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/intake/apiproxy"
	"github.com/tether-run/tether/provider"
)

// Fields of Daytona's CreateSandbox body the proxy reads or sets. Every
// other field is forwarded as the runner sent it.
const (
	fieldName     = "name"
	fieldLabels   = "labels"
	fieldAutoStop = "autoStopInterval"
)

// createBody is a POST /sandbox body taken apart only as far as the proxy
// needs: the top-level fields stay raw JSON, so whatever the runner's SDK
// sends (fields this version of tether has never heard of included)
// reaches Daytona unchanged.
type createBody struct {
	fields map[string]json.RawMessage
	// name is the runner's own sandbox name, "" when it gave none (absent,
	// null or ""): Daytona then names the sandbox after its id, which no
	// lookup by name could find, so tether names it.
	name string
	// labels are the runner's own labels (nil when it gave none).
	labels map[string]string
}

// parseCreate reads a create body. It refuses what Daytona would refuse
// anyway in a way that would leave tether unable to name or label the
// sandbox (not an object, a name that is not a string, labels that are not
// an object of strings), so no create the proxy cannot track is forwarded.
func parseCreate(b []byte) (*createBody, error) {
	var c createBody
	var err error
	if c.fields, err = apiproxy.Fields(b, false); err != nil {
		return nil, err
	}
	if _, err := apiproxy.Field(c.fields, fieldName, &c.name); err != nil {
		return nil, errors.New("name: must be a string")
	}
	if c.name != "" {
		if err := intent.ValidateSandboxName(c.name); err != nil {
			return nil, err
		}
	}
	if _, err := apiproxy.Field(c.fields, fieldLabels, &c.labels); err != nil {
		return nil, errors.New("labels: must be an object of strings")
	}
	return &c, nil
}

// rewrite returns the body to forward: the runner's fields as sent, with
// the name set to name when the runner gave none, tether's labels added to
// (and, on a clash, winning over) the runner's, and the intervals as iv
// rules them. overridden lists the runner's labels whose values tether's
// replaced; replaced maps each interval tether changed to what the runner
// had sent.
func (c *createBody) rewrite(name string, labels map[string]string, iv intervals) (out []byte, overridden []string, replaced map[string]string, err error) {
	fields := make(map[string]json.RawMessage, len(c.fields)+2)
	for k, v := range c.fields {
		fields[k] = v
	}
	if c.name == "" {
		if fields[fieldName], err = json.Marshal(name); err != nil {
			return nil, nil, nil, err
		}
	}
	merged, overridden := apiproxy.OverRunners(c.labels, labels)
	if fields[fieldLabels], err = json.Marshal(merged); err != nil {
		return nil, nil, nil, err
	}
	for _, f := range []string{fieldAutoStop, fieldAutoDelete} {
		sent, ok := fields[f]
		if !ok {
			sent = nil
		}
		if v, set := iv.apply(f, sent); set {
			if ok {
				if replaced == nil {
					replaced = map[string]string{}
				}
				replaced[f] = string(sent)
			}
			fields[f] = v
		}
	}
	out, err = encodeFields(fields)
	return out, overridden, replaced, err
}

// encodeFields encodes a JSON object with the runner's strings as it wrote
// them (no HTML escaping).
func encodeFields(fields map[string]json.RawMessage) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(fields); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// answeredSandbox is a sandbox as Daytona answered a create or a fork:
// what the drain's first read would have told (id, name, labels, state,
// auto-stop), and the organization it was created in.
type answeredSandbox struct {
	provider.Sandbox
	Organization string
	// AutoStop and AutoDelete are the intervals as answered (nil: absent).
	AutoStop, AutoDelete *int
}

// decodeSandbox reads a create or fork answer (the Sandbox schema).
func decodeSandbox(answer []byte) (answeredSandbox, error) {
	var sb struct {
		ID           string            `json:"id"`
		Name         string            `json:"name"`
		Organization string            `json:"organizationId"`
		Labels       map[string]string `json:"labels"`
		State        string            `json:"state"`
		AutoStop     *float64          `json:"autoStopInterval"`
		AutoDelete   *float64          `json:"autoDeleteInterval"`
	}
	if err := json.Unmarshal(answer, &sb); err != nil {
		return answeredSandbox{}, fmt.Errorf("answer: not a sandbox: %w", err)
	}
	if err := intent.ValidateSandboxID(sb.ID); err != nil {
		return answeredSandbox{}, fmt.Errorf("answer: %w", err)
	}
	out := answeredSandbox{Sandbox: provider.Sandbox{ID: sb.ID, Name: sb.Name, Labels: sb.Labels, State: sb.State}, Organization: sb.Organization}
	if sb.AutoStop != nil {
		n := int(*sb.AutoStop)
		out.AutoStopMinutes, out.AutoStop = n, &n
	}
	if sb.AutoDelete != nil {
		n := int(*sb.AutoDelete)
		out.AutoDelete = &n
	}
	return out, nil
}
