// Package intent is tether's vocabulary for a sandbox it answers for: the
// Intent, its states and the moves between them, what a runner declares
// (Declaration, Plan), the ownership labels and name every sandbox of an
// intent carries, and the validation of everything a runner may send.
//
// An intent is declared before the runner creates its sandbox, so that a
// sandbox can never exist without tether knowing its name. This package
// imports nothing of tether's: the public intent API (intentapi) and its
// Go client speak it without linking the journal's storage.
package intent

import (
	"fmt"
	"slices"
	"time"
)

// State is where an intent is in its life.
type State string

// The intent states. Live states are Pending, Observed and Releasing.
const (
	// Pending: declared; the sandbox may or may not have been created yet.
	Pending State = "pending"
	// Observed: the provider id of the sandbox is known.
	Observed State = "observed"
	// Releasing: tether has started deleting (or stopping) the sandbox.
	Releasing State = "releasing"
	// Gone: deletion confirmed by the provider (the observed id answers 404).
	Gone State = "gone"
	// Stopped: on_drain=stop and the provider confirmed the sandbox stopped.
	Stopped State = "stopped"
	// Released: the runner said it handled the sandbox itself.
	Released State = "released"
	// NeverCreated: a pending intent whose name never appeared within the horizon.
	NeverCreated State = "never-created"
	// Foreign: the sandbox found under the intent's name or id is not ours
	// (labels, name or account differ); tether never touches it.
	Foreign State = "foreign"
)

// Live reports whether tether still has work to do for an intent in state s.
func (s State) Live() bool { return s == Pending || s == Observed || s == Releasing }

// AllStates is every intent state, the live ones first.
func AllStates() []State {
	return []State{Pending, Observed, Releasing, Gone, Stopped, Released, NeverCreated, Foreign}
}

// KnownState reports whether s is one of the intent states.
func KnownState(s State) bool {
	return slices.Contains(AllStates(), s)
}

// transitions lists every legal move. Anything else is ErrIllegalTransition.
// Releasing → Releasing and Observed → Observed (same id) are allowed so a
// retried drain or a repeated observe is idempotent. Observing an id while
// Releasing records the id and keeps the state (the reaper found the sandbox
// by name during the drain).
var transitions = map[State][]State{
	Pending:   {Observed, Releasing, Released, NeverCreated, Foreign},
	Observed:  {Observed, Releasing, Released, Foreign},
	Releasing: {Releasing, Gone, Stopped, Released, Foreign, NeverCreated},
}

// CanTransition reports whether an intent may move from one state to another.
func CanTransition(from, to State) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// OnDrain says what the drain does with a sandbox.
type OnDrain string

const (
	DrainDelete OnDrain = "delete"
	DrainStop   OnDrain = "stop"
)

// Ownership label keys. Every sandbox created for an intent carries both.
const (
	LabelOwner  = "tether-owner"
	LabelIntent = "tether-intent"
	// NamePrefix prefixes the intent id to make the sandbox creation name.
	NamePrefix = "tether-"
)

// DefaultProvider is the provider of an intent that names none (the wire
// contract's default, docs/protocol.md): Daytona, tether's first.
const DefaultProvider = "daytona"

// Intent is one sandbox tether answers for.
type Intent struct {
	ID        string            `json:"id"`         // ULID, lower case
	Name      string            `json:"name"`       // creation name: tether-<id>, or the runner's own (Daytona API proxy)
	Labels    map[string]string `json:"labels"`     // ownership + scope labels the sandbox must carry
	Provider  string            `json:"provider"`   // "daytona", "e2b", "docker"; "" (older journals) is DefaultProvider
	OnDrain   OnDrain           `json:"on_drain"`   // delete or stop
	State     State             `json:"state"`      //
	SandboxID string            `json:"sandbox_id"` // provider id, once observed
	Key       string            `json:"key,omitempty"`
	// Account is the fingerprint of the provider credentials the intent was
	// declared under; the reaper acts only with the same account.
	Account string `json:"account,omitempty"`
	// Outcome is what the runner said when it released the intent:
	// deleted or kept.
	Outcome   string    `json:"outcome,omitempty"`
	Attempts  int       `json:"attempts,omitempty"`
	LastError string    `json:"last_error,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`

	// Lease is the lease (minutes of auto-stop) the intent was declared
	// under in lease mode (tether run --lease), 0 outside it: its sandbox
	// gets lease mode's short intervals, which must be undone if the
	// runner releases it as kept (HandBackPending).
	Lease int `json:"lease_minutes,omitempty"`
	// HandedBack: the provider confirmed the hand-back of a sandbox
	// released as kept (under a lease: its intervals restored; and
	// labelled to be kept), or it was gone or not ours by then: nothing is
	// left to do.
	HandedBack bool `json:"handed_back,omitempty"`
	// KeepOwed: released as kept by a tether that marks every sandbox it
	// hands back so that no sweep deletes it (the journal sets it at the
	// release): in lease mode or not, the hand-back is pending
	// (HandBackPending) until the provider confirms the mark. A release
	// journaled before it was set owes a hand-back only under a lease.
	KeepOwed bool `json:"keep_owed,omitempty"`
	// ParentIntent, for a sandbox forked from another one of this journal
	// (the API proxies journal every fork), is the intent of the sandbox
	// it was forked from. Daytona refuses to delete a sandbox while its
	// forks live, so the drain deletes forks first; a fork carries its
	// parent's labels until tether relabels it. An E2B fork carries its
	// parent's metadata for life, and a fork of a fork the first
	// parent's: its ParentIntent is the intent whose tether-intent it
	// carries, and its Name that intent's too.
	ParentIntent string `json:"parent_intent,omitempty"`

	// Witnessed: the intent's sandbox is proved its own by its id alone,
	// which the provider's own answer to a call this tether forwarded
	// named before the runner heard of it: a fork, made through the E2B
	// proxy, of a sandbox tether does not own, which carries that
	// sandbox's metadata and none of tether's (E2B cannot change it). Its
	// name and labels are not on the sandbox, so nothing finds it by them.
	Witnessed bool `json:"witnessed,omitempty"`

	// Replaced are sandbox ids once observed for the intent that proved
	// wrong (they answered 404, or named a sandbox that is not ours, while
	// the intent's own sandbox lived under its exact name): the reaper
	// replaced each by the id it found and verified (ReplaceObserved).
	// Oldest first, at most MaxReplaced. Journal only: not on the wire.
	Replaced []string `json:"replaced_sandbox_ids,omitempty"`
}

// ProviderName is the provider the intent is resolved with: its own, or
// DefaultProvider when it names none.
func (in Intent) ProviderName() string {
	if in.Provider == "" {
		return DefaultProvider
	}
	return in.Provider
}

// Live reports whether the intent still needs resolving.
func (in Intent) Live() bool { return in.State.Live() }

// HandBackPending reports whether the intent's sandbox, released as kept
// by its runner, has not been handed back yet: under a lease, its lease's
// short intervals would stop and delete it once nobody renews it; in any
// mode, unmarked, a sweep would delete it once old and idle. Durable work,
// tried until the provider confirms it (MarkHandedBack).
func (in Intent) HandBackPending() bool {
	return in.State == Released && in.Outcome == OutcomeKept && (in.Lease > 0 || in.KeepOwed) && in.SandboxID != "" && !in.HandedBack
}

// String names an intent in logs and reports.
func (in Intent) String() string {
	if in.SandboxID != "" {
		return fmt.Sprintf("%s (sandbox %s)", in.Name, in.SandboxID)
	}
	return in.Name
}
