package provider

import (
	"strings"
	"testing"
)

// One account, however its URL is spelt; another key or host, another
// account; the key never shows.
func TestFingerprint(t *testing.T) {
	a := Fingerprint("daytona", "https://APP.daytona.io/api/", "secret-key-1")
	if b := Fingerprint("daytona", " https://app.daytona.io/api", "secret-key-1"); a != b {
		t.Errorf("one account, two fingerprints: %s, %s", a, b)
	}
	for _, other := range []string{
		Fingerprint("daytona", "https://app.daytona.io/api", "secret-key-2"),
		Fingerprint("daytona", "https://eu.daytona.io/api", "secret-key-1"),
		Fingerprint("e2b", "https://app.daytona.io/api", "secret-key-1"),
	} {
		if other == a {
			t.Errorf("two accounts, one fingerprint %s", a)
		}
	}
	if !strings.HasPrefix(a, "daytona:") || strings.Contains(a, "secret") {
		t.Errorf("fingerprint %q", a)
	}
}
