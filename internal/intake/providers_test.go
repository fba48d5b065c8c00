package intake

import (
	"errors"
	"testing"
)

// A declaration may name the default provider or one tether has
// credentials for, and is journaled under that provider's account; any
// other is refused.
func TestNewIntentOf(t *testing.T) {
	in := &Intake{Provider: "daytona", Accounts: map[string]string{"daytona": "d:1", "e2b": "e:2"}}
	for _, c := range []struct{ name, provider, account string }{
		{"", "daytona", "d:1"}, {"daytona", "daytona", "d:1"}, {"e2b", "e2b", "e:2"},
	} {
		n, err := in.NewIntentOf(c.name, nil, "", "", "")
		if err != nil || n.Provider != c.provider || n.Account != c.account {
			t.Errorf("%q: %+v, %v", c.name, n, err)
		}
	}
	if _, err := in.NewIntentOf("E2B", nil, "", "", ""); !errors.Is(err, ErrUnknownProvider) {
		t.Errorf("an unknown provider: %v", err)
	}
	if _, err := (&Intake{Provider: "daytona"}).NewIntentOf("e2b", nil, "", "", ""); !errors.Is(err, ErrUnknownProvider) {
		t.Errorf("e2b without credentials: %v", err)
	}
}
