package journal

import (
	"fmt"

	"github.com/tether-run/tether/intent"
)

// The state changes an intake makes on what it sees the runner and the
// provider do, each named for what it means. An intake never picks a target
// state itself: these go through the same state machine as Transition, and
// add what their meaning rules out.

// CloseRefusedCreate closes intent id as NeverCreated, with why as its last
// error: the provider refused the create before doing anything (an API
// proxy calls it on such an answer to a create or fork it journaled, or
// when the create was never sent), so no
// sandbox can exist under the intent's name and the drain need not look for
// one. An intent with an observed sandbox id certainly had its create run,
// so it is refused with ErrIllegalTransition, as is one no longer pending or
// releasing.
func (j *Journal) CloseRefusedCreate(id, why string) (intent.Intent, error) {
	return j.update(id, func(in *intent.Intent) (bool, error) {
		if in.SandboxID != "" {
			return false, fmt.Errorf("intent %s: sandbox %s was observed, its create was not refused: %w", in.ID, in.SandboxID, ErrIllegalTransition)
		}
		return moveTo(in, intent.NeverCreated, why)
	})
}

// MarkDeleteRequested moves intent id to Releasing and clears its last
// error: the runner asked the provider to delete the intent's sandbox and
// the provider accepted (an API proxy calls it after passing on a runner's
// successful delete). The drain then confirms the sandbox is gone
// instead of deleting it again. Marking it twice changes nothing more; an
// intent that has ended (released or resolved meanwhile) is refused with
// ErrIllegalTransition.
func (j *Journal) MarkDeleteRequested(id string) (intent.Intent, error) {
	return j.update(id, func(in *intent.Intent) (bool, error) {
		return moveTo(in, intent.Releasing, "")
	})
}
