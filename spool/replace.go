package spool

import (
	"fmt"
)

// MaxReplaced bounds the wrong sandbox ids an intent keeps (Intent.Replaced);
// past it the oldest are dropped. Each replacement needs a 404 (or a foreign
// sandbox) under the old id and a verified sandbox under the intent's name,
// so a real intent has one or two at most.
const MaxReplaced = 8

// ReplaceObserved replaces the sandbox id observed for intent id, wrongID,
// by foundID. It is the one way an observed id changes, and it is for the
// reaper only: a runner that observed a wrong id (a typo, two ids swapped)
// leaves the intent pointing at a sandbox that does not exist or is not
// ours, and a 404 of that id would close the intent as gone while its
// sandbox runs. The caller must have found foundID under the intent's exact
// name and verified it as the intent's (name and every label) — the journal
// cannot check that; Observe, which runners use, still refuses a different
// id (ErrObservedOther).
//
// It is a compare-and-swap: the intent must be live (observed or
// releasing, its state is kept) with wrongID observed, else
// ErrObservedOther (someone changed the id meanwhile) or
// ErrIllegalTransition. The wrong id is kept in Replaced and named in
// LastError. Replacing by the id already recorded changes nothing.
func (j *Journal) ReplaceObserved(id, wrongID, foundID string) (Intent, error) {
	if err := ValidateSandboxID(foundID); err != nil {
		return Intent{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return j.update(id, func(in *Intent) (bool, error) {
		switch {
		case in.SandboxID == foundID:
			return false, nil
		case in.State != Observed && in.State != Releasing:
			return false, fmt.Errorf("intent %s is %s, its observed id cannot be replaced: %w", in.ID, in.State, ErrIllegalTransition)
		case in.SandboxID != wrongID:
			return false, fmt.Errorf("intent %s: sandbox %s observed, not %s: %w", in.ID, in.SandboxID, wrongID, ErrObservedOther)
		}
		in.Replaced = append(in.Replaced, wrongID)
		if n := len(in.Replaced); n > MaxReplaced {
			in.Replaced = append([]string(nil), in.Replaced[n-MaxReplaced:]...)
		}
		in.SandboxID = foundID
		in.LastError = fmt.Sprintf("observed sandbox id %s was wrong: the sandbox named %s is %s", wrongID, in.Name, foundID)
		return true, nil
	})
}
