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
