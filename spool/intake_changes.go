package spool

import "fmt"

// The two state changes an intake itself may make, each named for the one
// fact it records. The state machine is otherwise the reaper's (Transition,
// Note, ReplaceObserved); an intake sees the journal through the narrow
// interface internal/intake declares, which holds these and not those.

// CloseRefusedCreate closes intent id as never-created: its create was
// refused before the provider made anything (refused outright, or never
// sent), why says how. It is refused (ErrIllegalTransition) for an intent
// that has a sandbox id, since then something was created, and for one
// the state machine does not let close so (released, or already resolved).
func (j *Journal) CloseRefusedCreate(id, why string) (Intent, error) {
	return j.update(id, func(in *Intent) (bool, error) {
		if in.SandboxID != "" {
			return false, fmt.Errorf("intent %s has sandbox %s, its create was not refused: %w", in.ID, in.SandboxID, ErrIllegalTransition)
		}
		if !CanTransition(in.State, NeverCreated) {
			return false, fmt.Errorf("intent %s: %s → %s: %w", in.ID, in.State, NeverCreated, ErrIllegalTransition)
		}
		in.State = NeverCreated
		in.LastError = why
		return true, nil
	})
}

// MarkDeleteRequested moves a live intent to releasing because the runner
// itself asked the provider to delete its sandbox and the provider
// accepted: the drain then only confirms it gone instead of deleting it
// again. A released or resolved intent is ErrIllegalTransition.
func (j *Journal) MarkDeleteRequested(id string) (Intent, error) {
	return j.update(id, func(in *Intent) (bool, error) {
		if !CanTransition(in.State, Releasing) {
			return false, fmt.Errorf("intent %s: %s → %s: %w", in.ID, in.State, Releasing, ErrIllegalTransition)
		}
		in.State = Releasing
		in.LastError = ""
		return true, nil
	})
}
