package intent

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Limits on what a runner may put into an intent. They are checked at every
// entry (socket, spool file, CLI) so nothing the provider would refuse, and
// nothing that could confuse the owner check, reaches the journal.
//
// Daytona accepts labels as a free string map; these bounds are the stricter
// Kubernetes-style ones so the same labels also fit other providers.
const (
	// MaxLabels bounds the labels of one request (scope and ownership
	// labels come on top).
	MaxLabels = 64
	// MaxLabelKey is the longest label key in bytes.
	MaxLabelKey = 63
	// MaxLabelValue is the longest label value in bytes.
	MaxLabelValue = 255
	// MaxKey is the longest idempotency key in bytes.
	MaxKey = 128
	// MaxSandboxID is the longest provider sandbox id in bytes.
	MaxSandboxID = 128
	// MaxIntentID is the longest intent id in bytes (a spool writer may
	// choose its own).
	MaxIntentID = 64
)

// ValidateLabels checks request labels: at most MaxLabels; keys of 1 to
// MaxLabelKey bytes of [A-Za-z0-9._/-] starting with a letter or digit and
// not in the reserved "tether-" space; values of at most MaxLabelValue bytes
// of printable UTF-8. The error names the offending label.
func ValidateLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return fmt.Errorf("labels: %d labels, at most %d allowed", len(labels), MaxLabels)
	}
	for k, v := range labels {
		if err := validateLabelKey(k); err != nil {
			return err
		}
		if len(v) > MaxLabelValue {
			return fmt.Errorf("labels[%q]: value is %d bytes, at most %d allowed", k, len(v), MaxLabelValue)
		}
		if !printable(v) {
			return fmt.Errorf("labels[%q]: value must be printable UTF-8 without control characters", k)
		}
	}
	return nil
}

func validateLabelKey(k string) error {
	if k == "" {
		return fmt.Errorf("labels: empty key")
	}
	if len(k) > MaxLabelKey {
		return fmt.Errorf("labels[%q]: key is %d bytes, at most %d allowed", Clip(k), len(k), MaxLabelKey)
	}
	// In any case: a provider or a person reading labels may not tell
	// Tether-Owner from tether-owner.
	if strings.HasPrefix(strings.ToLower(k), NamePrefix) {
		return fmt.Errorf("labels[%q]: keys starting with %q (in any case) are reserved for ownership labels", k, NamePrefix)
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '/' && c != '-') {
			return fmt.Errorf("labels[%q]: key must start with a letter or digit and hold only letters, digits and . _ / -", k)
		}
	}
	return nil
}

// ValidateKey checks an idempotency key: 1 to MaxKey bytes of printable
// ASCII without spaces.
func ValidateKey(key string) error {
	if key == "" || len(key) > MaxKey {
		return fmt.Errorf("key: must be 1 to %d bytes", MaxKey)
	}
	for i := 0; i < len(key); i++ {
		if key[i] <= ' ' || key[i] > '~' {
			return fmt.Errorf("key: must be printable ASCII without spaces")
		}
	}
	return nil
}

// ValidateSandboxID checks a provider sandbox id: 1 to MaxSandboxID bytes of
// printable ASCII without spaces or slashes (it goes into provider URLs).
func ValidateSandboxID(id string) error {
	if id == "" || len(id) > MaxSandboxID {
		return fmt.Errorf("sandbox_id: must be 1 to %d bytes", MaxSandboxID)
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' || id[i] == '/' || id[i] == '?' || id[i] == '#' || id[i] == '%' {
			return fmt.Errorf("sandbox_id: must be printable ASCII without spaces, '/', '?', '#' or '%%'")
		}
	}
	return nil
}

// ValidateIntentID checks an intent id: 1 to MaxIntentID characters of
// [a-z0-9_-], starting with a letter or digit. tether's own ids are
// lower-case ULIDs; a spool writer may choose its own. The sandbox name
// NamePrefix+id is then made of lower-case letters, digits, '-' and '_',
// which Daytona accepts as a name.
func ValidateIntentID(id string) error {
	if id == "" || len(id) > MaxIntentID {
		return fmt.Errorf("id: not an intent id (1 to %d characters of [a-z0-9_-])", MaxIntentID)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '_' && c != '-') {
			return fmt.Errorf("id %q: not an intent id (1 to %d characters of [a-z0-9_-], starting with a letter or digit)", Clip(id), MaxIntentID)
		}
	}
	return nil
}

// ValidateOnDrain checks on_drain; the empty string means delete.
func ValidateOnDrain(d OnDrain) error {
	switch d {
	case "", DrainDelete, DrainStop:
		return nil
	}
	return fmt.Errorf("on_drain %q: must be delete or stop", Clip(string(d)))
}

// Release outcomes a runner may report.
const (
	OutcomeDeleted = "deleted"
	OutcomeKept    = "kept"
)

// ValidateOutcome checks a release outcome; the empty string means deleted.
func ValidateOutcome(o string) error {
	switch o {
	case "", OutcomeDeleted, OutcomeKept:
		return nil
	}
	return fmt.Errorf("outcome %q: must be deleted or kept", Clip(o))
}

// IsULID reports whether s is 26 characters of lower-case Crockford base32
// whose first character keeps the value within 128 bits.
func IsULID(s string) bool {
	if len(s) != 26 || s[0] > '7' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z') || c == 'i' || c == 'l' || c == 'o' || c == 'u' {
			return false
		}
	}
	return true
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < ' ' || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return false
		}
	}
	return true
}

// Clip keeps error messages about hostile input short.
func Clip(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}

// MaxSandboxName is the longest sandbox name a runner may choose, in bytes.
const MaxSandboxName = 255

// ValidateSandboxName checks a creation name a runner chose itself (the
// Daytona API proxy keeps it): 1 to MaxSandboxName bytes of printable
// UTF-8. The name goes into provider URLs and is looked up verbatim by the
// reaper, so nothing the provider could read another way gets in.
func ValidateSandboxName(name string) error {
	if name == "" || len(name) > MaxSandboxName {
		return fmt.Errorf("name: must be 1 to %d bytes", MaxSandboxName)
	}
	if !printable(name) {
		return fmt.Errorf("name %q: must be printable UTF-8 without control characters", Clip(name))
	}
	return nil
}
