package daytonaproxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/tether-run/tether/spool"
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
	// autoStopOff: autoStopInterval is 0 or null, i.e. Daytona's auto-stop,
	// the backstop that bounds a leaked sandbox, is off. An absent one is
	// left alone: the server's default (15 minutes) applies.
	autoStopOff bool
}

// parseCreate reads a create body. It refuses what Daytona would refuse
// anyway in a way that would leave tether unable to name or label the
// sandbox (not an object, a name that is not a string, labels that are not
// an object of strings), so no create the proxy cannot track is forwarded.
func parseCreate(b []byte) (*createBody, error) {
	var c createBody
	if err := json.Unmarshal(b, &c.fields); err != nil {
		return nil, fmt.Errorf("body: not a JSON object: %w", err)
	}
	if c.fields == nil { // the body was null
		return nil, errors.New("body: not a JSON object")
	}
	if raw, ok := c.fields[fieldName]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &c.name); err != nil {
			return nil, fmt.Errorf("name: must be a string")
		}
		if c.name != "" {
			if err := spool.ValidateSandboxName(c.name); err != nil {
				return nil, err
			}
		}
	}
	if raw, ok := c.fields[fieldLabels]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &c.labels); err != nil {
			return nil, fmt.Errorf("labels: must be an object of strings")
		}
	}
	if raw, ok := c.fields[fieldAutoStop]; ok {
		if isNull(raw) {
			c.autoStopOff = true
		} else if f, err := strconv.ParseFloat(string(bytes.TrimSpace(raw)), 64); err == nil && f == 0 {
			c.autoStopOff = true
		}
	}
	return &c, nil
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// declared reports whether the runner's labels carry an owner: it declared
// the sandbox to a tether itself and creates it with that tether's name and
// labels, so the create is not tether's to rewrite or journal again.
func (c *createBody) declared() bool {
	_, ok := c.labels[spool.LabelOwner]
	return ok
}

// rewrite returns the body to forward: the runner's fields as sent, with
// the name set to name when the runner gave none, tether's labels added to
// (and, on a clash, winning over) the runner's, and autoStopInterval set to
// autoStop minutes when the runner turned auto-stop off (autoStop 0 leaves
// it alone). overridden lists the runner's labels whose values tether's
// replaced.
func (c *createBody) rewrite(name string, labels map[string]string, autoStop int) (out []byte, overridden []string, err error) {
	fields := make(map[string]json.RawMessage, len(c.fields)+2)
	for k, v := range c.fields {
		fields[k] = v
	}
	if c.name == "" {
		if fields[fieldName], err = json.Marshal(name); err != nil {
			return nil, nil, err
		}
	}
	merged := make(map[string]string, len(c.labels)+len(labels))
	for k, v := range c.labels {
		merged[k] = v
	}
	for k, v := range labels {
		if old, ok := merged[k]; ok && old != v {
			overridden = append(overridden, k)
		}
		merged[k] = v
	}
	if fields[fieldLabels], err = json.Marshal(merged); err != nil {
		return nil, nil, err
	}
	if c.autoStopOff && autoStop > 0 {
		fields[fieldAutoStop] = json.RawMessage(strconv.Itoa(autoStop))
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // the runner's strings go out as it wrote them
	if err := enc.Encode(fields); err != nil {
		return nil, nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), overridden, nil
}

// sandboxID reads the id from a create answer.
func sandboxID(answer []byte) (string, error) {
	var sb struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(answer, &sb); err != nil {
		return "", fmt.Errorf("answer: not a sandbox: %w", err)
	}
	if err := spool.ValidateSandboxID(sb.ID); err != nil {
		return "", fmt.Errorf("answer: %w", err)
	}
	return sb.ID, nil
}
