package lease

// AutoDelete is lease mode's auto-delete interval (minutes after a stop)
// for a sandbox the drain would delete, given the one it has or its runner
// asked for (negative: never, Daytona's default).
//
// A sandbox is not made ephemeral (0): Daytona deletes an ephemeral sandbox
// when it stops, whoever stops it (sandbox.service.ts:2169-2171 at
// v0.190.0), so a runner's own stop, then start, would fail, and an
// ephemeral sandbox cannot be archived (:2064-2073). Instead it is deleted
// at most the lease after it stops: Daytona's auto-delete check counts
// from the sandbox's last activity (sandbox.manager.ts:246-256), which
// tether's renewals keep fresh while the runner lives, stopped or not. So
// after a host loss a running sandbox is stopped within the lease and
// deleted within another; one the runner had stopped itself is deleted
// within the lease.
//
// An auto-delete of 0 the runner asked for stays: the sandbox is ephemeral
// as it would be without tether (GPU and linked sandboxes must be,
// sandbox.service.ts:524-526). A shorter one than the lease stays too.
func AutoDelete(asked, lease int) int {
	switch {
	case asked == 0:
		return 0
	case asked < 0 || asked > lease:
		return lease
	}
	return asked
}
