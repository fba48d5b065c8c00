package daytonaproxy

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// fieldAutoDelete is the create body's auto-delete interval (minutes after
// a stop; 0 at once, -1 never).
const fieldAutoDelete = "autoDeleteInterval"

// leaseBody sets lease mode's intervals in a rewritten create body: the
// short auto-stop, and an auto-delete of at most the lease
// (leaseAutoDelete), so that a sandbox whose renewals stop (tether gone
// with its host) is stopped and deleted by Daytona itself. Every sandbox
// the proxy creates is an intent with on_drain delete. What the runner
// asked for is replaced, and returned so it can be logged.
func leaseBody(body []byte, minutes int) (out []byte, replaced map[string]string, err error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, nil, err
	}
	autoDelete, _ := leaseAutoDelete(fields[fieldAutoDelete], minutes)
	want := map[string]string{fieldAutoStop: strconv.Itoa(minutes), fieldAutoDelete: string(autoDelete)}
	for k, v := range want {
		if old, ok := fields[k]; ok && string(bytes.TrimSpace(old)) != v {
			if replaced == nil {
				replaced = map[string]string{}
			}
			replaced[k] = string(old)
		}
		fields[k] = json.RawMessage(v)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // the runner's strings go out as it wrote them
	if err := enc.Encode(fields); err != nil {
		return nil, nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), replaced, nil
}
