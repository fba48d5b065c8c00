package spool

import "fmt"

// MarkHandedBack records that a sandbox released as kept under a lease
// needs nothing more from tether (Intent.HandedBack): its hand-back was
// confirmed, or it was gone or not ours. Only a released intent can be
// marked; marking one again changes nothing.
func (j *Journal) MarkHandedBack(id string) (Intent, error) {
	return j.update(id, func(in *Intent) (bool, error) {
		if in.State != Released {
			return false, fmt.Errorf("intent %s is %s, not released: %w", in.ID, in.State, ErrIllegalTransition)
		}
		if in.HandedBack {
			return false, nil
		}
		in.HandedBack = true
		return true, nil
	})
}
