package intake

import "testing"

// The lease of lease mode is the default provider's: an intent of another
// provider is journaled without one (that provider has its own backstop).
func TestNewIntentOfOtherProviderHasNoLease(t *testing.T) {
	in := &Intake{Provider: "daytona", Accounts: map[string]string{"daytona": "d:1", "e2b": "e:2"}, Leases: map[string]int{"daytona": 30}}
	for _, c := range []struct {
		name  string
		lease int
	}{{"", 30}, {"daytona", 30}, {"e2b", 0}} {
		n, err := in.NewIntentOf(c.name, nil, "", "", "")
		if err != nil || n.Lease != c.lease {
			t.Errorf("%q: lease %d (%v), want %d", c.name, n.Lease, err, c.lease)
		}
	}
}
