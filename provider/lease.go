package provider

import "context"

// CallRenew is the kind of a Leaser's Renew call, for Throttled.
const CallRenew = "renew"

// Leaser is implemented by a Provider that can stop and delete a sandbox
// by itself once nobody renews it: lease mode (`tether run --lease`) sets
// a short auto-stop (SetAutoStop) and, for a sandbox the drain would
// delete, auto-delete at once, then renews every live sandbox while the
// runner lives. If tether dies with its host, renewals stop and the
// provider's own timers do what the drain would have done.
type Leaser interface {
	// SetAutoDelete sets how many minutes after it stops the sandbox is
	// deleted: 0 at once, negative never.
	SetAutoDelete(ctx context.Context, id string, minutes int) error
	// Renew marks the sandbox active now: its auto-stop interval starts
	// again. The provider may take a renewal late or merge close ones
	// (Daytona: one per 5 s, seen within 10 s).
	Renew(ctx context.Context, id string) error
}

// LeaseAutoDelete is lease mode's auto-delete interval (minutes after a stop)
// for a sandbox the drain would delete, given the one it has or its runner
// asked for (negative: never, Daytona's default).
//
// A sandbox is not made ephemeral (0): Daytona deletes an ephemeral sandbox
// when it stops, whoever stops it (sandbox.service.ts:2169-2171 at
// v0.190.0), so a runner's own stop, then start, would fail, and an
// ephemeral sandbox cannot be archived (:2064-2073). Instead it is deleted
// at most the lease after it stops: Daytona's auto-delete check counts
// from the sandbox's last activity (sandbox.manager.ts:257-263), which
// tether's renewals keep fresh while the runner lives, stopped or not. So
// after a host loss a running sandbox is stopped within the lease and
// deleted within another; one the runner had stopped itself is deleted
// within the lease.
//
// An auto-delete of 0 the runner asked for stays: the sandbox is ephemeral
// as it would be without tether (GPU and linked sandboxes must be,
// sandbox.service.ts:524-526). A shorter one than the lease stays too.
func LeaseAutoDelete(asked, lease int) int {
	switch {
	case asked == 0:
		return 0
	case asked < 0 || asked > lease:
		return lease
	}
	return asked
}
