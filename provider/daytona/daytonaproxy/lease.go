package daytonaproxy

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/tether-run/tether/internal/intake/apiproxy"
)

// fieldAutoDelete is the create body's auto-delete interval (minutes after
// a stop; 0 at once, -1 never).
const fieldAutoDelete = "autoDeleteInterval"

// intervals is the one rule for every auto-stop and auto-delete interval a
// runner sends through the proxy for a sandbox of this tether, in a create
// (POST /sandbox) and in a setter (POST /sandbox/{id}/autostop/{n},
// /autodelete/{n}), so that no later call undoes what the create set.
type intervals struct {
	// backstop replaces an auto-stop of 0 (or null: the SDKs send null
	// for "off" too), Daytona's "never stop"; 0 leaves it as sent.
	backstop int
	// lease, in lease mode (tether run --lease), is the auto-stop every
	// sandbox gets, with an auto-delete of at most as many minutes
	// (leaseAutoDelete: not 0, so the runner's own stop deletes nothing),
	// so that a sandbox whose renewals stop (tether gone with its host) is
	// stopped and deleted by Daytona itself; 0: off.
	lease int
}

// intervals is the proxy's rule.
func (p *Proxy) intervals() intervals {
	return intervals{backstop: p.AutoStopMinutes, lease: p.LeaseMinutes}
}

// apply rules one interval: field (fieldAutoStop or fieldAutoDelete), sent
// as the runner sent it (raw JSON, nil when absent). It returns the value to
// send and true when that is not what the runner sent; other fields, and
// values it leaves alone, come back with false.
func (iv intervals) apply(field string, sent json.RawMessage) (json.RawMessage, bool) {
	var want string
	switch {
	case field == fieldAutoStop && iv.lease > 0:
		want = strconv.Itoa(iv.lease)
	case field == fieldAutoDelete && iv.lease > 0:
		return leaseAutoDelete(sent, iv.lease)
	case field == fieldAutoStop && iv.backstop > 0 && sent != nil && intervalOff(sent):
		want = strconv.Itoa(iv.backstop)
	default:
		return sent, false
	}
	if sent != nil && string(bytes.TrimSpace(sent)) == want {
		return sent, false
	}
	return json.RawMessage(want), true
}

// intervalOff reports whether an auto-stop as sent means "never": 0 in any
// spelling, or null.
func intervalOff(raw json.RawMessage) bool {
	if apiproxy.IsNull(raw) {
		return true
	}
	f, err := strconv.ParseFloat(string(bytes.TrimSpace(raw)), 64)
	return err == nil && f == 0
}

// replacedBy names the rule that replaced a runner's interval, for the log.
func (iv intervals) replacedBy() string {
	if iv.lease > 0 {
		return "lease mode"
	}
	return "the auto-stop backstop"
}
