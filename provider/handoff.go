package provider

import (
	"context"
	"errors"
)

// HandOffer is implemented by a Provider that can leave a sandbox to its
// own timers — stopped, or deleted, soon, without tether — through calls
// that count against another quota than the sandbox's delete. A drain
// whose delete of a sandbox cannot be sent before its deadline (the
// delete's quota is spent past it) hands the sandbox off this way, so
// that it does not run on until the backstop's much longer timer.
type HandOffer interface {
	// HandOff sets sandbox id to end by itself soon: stopped when stop is
	// set (the runner asked for a stop), else deleted. It returns what it
	// set, in words for the journal and the drain's report. It never sets
	// what the runner did not ask for: ErrNoHandOff when the provider's
	// only way would (an E2B timeout kills a sandbox the runner asked to
	// have paused).
	HandOff(ctx context.Context, id string, stop bool) (string, error)
}

// ErrNoHandOff: the provider cannot hand this sandbox off without doing
// more than its runner asked for.
var ErrNoHandOff = errors.New("the provider cannot hand this sandbox off without doing more than its runner asked for")
