package apiproxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// A proxy takes a request body apart into its fields, each kept as sent
// (json.RawMessage): it reads the few it rules (a name, labels, a
// timeout) and forwards every other one byte for byte, so a field it does
// not know reaches the provider as the runner wrote it.

// Fields reads body as a JSON object of raw fields. An empty body is an
// empty object when emptyIsObject (the engine or server then answers as
// it does to one); anything but an object — null among them — is refused,
// since a proxy could not rule or forward its fields.
func Fields(body []byte, emptyIsObject bool) (map[string]json.RawMessage, error) {
	if emptyIsObject && strings.TrimSpace(string(body)) == "" {
		return map[string]json.RawMessage{}, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, fmt.Errorf("body: not a JSON object: %w", err)
	}
	if fields == nil { // the body was null
		return nil, errors.New("body: not a JSON object")
	}
	return fields, nil
}

// Field decodes the field name of fields into v when it is there and not
// null, and reports whether it was; an error says only that the field is
// not what v holds (the caller names what it must be).
func Field(fields map[string]json.RawMessage, name string, v any) (bool, error) {
	raw, ok := fields[name]
	if !ok || IsNull(raw) {
		return false, nil
	}
	return true, json.Unmarshal(raw, v)
}

// IsNull reports whether a raw field is JSON's null.
func IsNull(raw json.RawMessage) bool { return strings.TrimSpace(string(raw)) == "null" }

// OverRunners is the runner's labels (or metadata) with tether's over
// them, as every proxy writes them into what it forwards: each of the
// runner's is kept unless tether's own has that key, and overridden lists
// those whose value tether's replaced, sorted, for the proxy to say so.
func OverRunners(runner, tether map[string]string) (merged map[string]string, overridden []string) {
	merged = make(map[string]string, len(runner)+len(tether))
	for k, v := range runner {
		merged[k] = v
	}
	for k, v := range tether {
		if old, ok := merged[k]; ok && old != v {
			overridden = append(overridden, k)
		}
		merged[k] = v
	}
	slices.Sort(overridden)
	return merged, overridden
}
