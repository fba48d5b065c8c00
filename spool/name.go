package spool

import "fmt"

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
		return fmt.Errorf("name %q: must be printable UTF-8 without control characters", truncate(name))
	}
	return nil
}
