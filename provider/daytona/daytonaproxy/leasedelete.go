package daytonaproxy

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"

	"github.com/tether-run/tether/internal/intake/apiproxy"
	"github.com/tether-run/tether/provider"
)

// leaseAutoDelete is the auto-delete interval lease mode forwards for the
// one a runner sent (raw JSON; nil when absent), in a create or a setter:
// provider.LeaseAutoDelete's rule. A runner's stop, start and archive then pass
// through untouched and behave as without tether: the sandbox is not
// ephemeral unless the runner made it so, and the lease bounds how long it
// outlives a lost tether once stopped. It returns the value to send and
// whether that is not what the runner sent.
func leaseAutoDelete(sent json.RawMessage, minutes int) (json.RawMessage, bool) {
	asked := -1 // absent or null: Daytona's default, never
	if sent != nil && !apiproxy.IsNull(sent) {
		f, err := strconv.ParseFloat(string(bytes.TrimSpace(sent)), 64)
		switch {
		case err != nil || math.IsNaN(f):
			// Not a number: Daytona would refuse it; the lease's is valid.
		case f == 0:
			asked = 0
		case f > 0 && f <= float64(minutes):
			return sent, false // shorter than the lease: the runner's stays
		}
	}
	want := provider.LeaseAutoDelete(asked, minutes)
	if sent != nil && string(bytes.TrimSpace(sent)) == strconv.Itoa(want) {
		return sent, false
	}
	return json.RawMessage(strconv.Itoa(want)), true
}
