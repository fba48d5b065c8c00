package e2btest_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tether-run/tether/provider/e2b/e2btest"
)

func TestParseFaults(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want e2btest.Faults
		fail string
	}{
		{spec: "", want: e2btest.Faults{}},
		{spec: "seed=7, latency=50ms,5xx=0.1,429=0.2,retry-after=2s,create-lost=0.05,fork-lost=0.2,kill-fail=0.3,routes=get+kill",
			want: e2btest.Faults{Seed: 7, Latency: 50 * time.Millisecond, Rate5xx: 0.1, Rate429: 0.2, RetryAfter: 2 * time.Second,
				RateCreateLost: 0.05, RateForkLost: 0.2, RateKillFail: 0.3, Routes: []string{e2btest.RouteGet, e2btest.RouteKill}}},
		{spec: "5xx=2", fail: "out of range"},
		{spec: "5xx=NaN", fail: "out of range"},
		{spec: "latency=-1s", fail: "negative"},
		{spec: "routes=get+nope", fail: "unknown route"},
		{spec: "hang=0.1", fail: "unknown key"},
		{spec: "seed", fail: "key=value"},
	} {
		got, err := e2btest.ParseFaults(tc.spec)
		if tc.fail != "" {
			if err == nil || !strings.Contains(err.Error(), tc.fail) {
				t.Errorf("ParseFaults(%q) = %v, want an error with %q", tc.spec, err, tc.fail)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseFaults(%q) = %+v, %v", tc.spec, got, err)
		}
		if again, err := e2btest.ParseFaults(got.String()); err != nil || again.String() != got.String() {
			t.Errorf("round trip of %q: %q, %v", got.String(), again.String(), err)
		}
	}
}

// Fault specs come from command lines: any of them parses or is refused
// without a panic, and what parses renders back to itself.
func FuzzParseFaults(f *testing.F) {
	f.Add("seed=1,latency=1ms,5xx=0.5,routes=get+kill")
	f.Add("429=1,retry-after=1h")
	f.Add(",,=,")
	f.Fuzz(func(t *testing.T, spec string) {
		got, err := e2btest.ParseFaults(spec)
		if err != nil {
			return
		}
		again, err := e2btest.ParseFaults(got.String())
		if err != nil || again.String() != got.String() {
			t.Fatalf("%q renders %q, which reads back as %q, %v", spec, got.String(), again.String(), err)
		}
	})
}
