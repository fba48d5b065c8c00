package reaper

// What proves a sandbox an intent's: mismatch (id, name, every label),
// Daytona's deletion rename, the read that checks it (readOurs), and the
// memory of the sandbox ids a read proved ours (remember, isVerified).

import (
	"context"
	"fmt"
	"strings"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/provider"
)

// destroyedPrefix is how Daytona renames a sandbox the moment its deletion
// starts (DESTROYED_<name>_<unix ms>): a sandbox in that state still counts
// as the intent's by name.
const destroyedPrefix = "DESTROYED_"

// mismatch says why sb is not the intent's sandbox, or "" when it is: the
// observed id, the name, and every label of the intent (ownership and scope)
// must match, and the intent must carry its ownership labels at all — an
// intent without them could match anybody's sandbox.
func mismatch(in intent.Intent, sb provider.Sandbox) string {
	if in.SandboxID != "" && sb.ID != in.SandboxID {
		return fmt.Sprintf("id %s, observed %s", sb.ID, in.SandboxID)
	}
	if in.Witnessed {
		// Proved by its id, from the provider's own answer; it carries
		// another sandbox's metadata.
		if in.SandboxID == "" {
			return "a witnessed intent has no observed id to verify"
		}
		return ""
	}
	if sb.Name != in.Name && !renamedForDeletion(in, sb) {
		// A deleted sandbox keeps its id and labels but is renamed at once,
		// whatever its (lagging) state: DESTROYED_<name>_<unix ms>.
		return fmt.Sprintf("name %q, want %q", sb.Name, in.Name)
	}
	if in.Labels[intent.LabelOwner] == "" {
		return "intent has no " + intent.LabelOwner + " label to verify"
	}
	got, ok := sb.Labels[intent.LabelIntent]
	if !ok || got != in.ID && (in.ParentIntent == "" || got != in.ParentIntent) {
		// A fork carries its parent's labels until tether relabels it
		// (an E2B fork, for life); its exact name and the owner prove it
		// ours meanwhile.
		return fmt.Sprintf("label %s=%q, want %q", intent.LabelIntent, got, in.ID)
	}
	for k, want := range in.Labels {
		if k == intent.LabelIntent {
			continue
		}
		got, ok := sb.Labels[k]
		if !ok {
			return fmt.Sprintf("label %s missing, want %q", k, want)
		}
		if got != want {
			return fmt.Sprintf("label %s=%q, want %q", k, got, want)
		}
	}
	return ""
}

// renamedForDeletion reports whether sb, read by the intent's observed id,
// carries Daytona's deletion rename DESTROYED_<intent name>_<unix ms>.
func renamedForDeletion(in intent.Intent, sb provider.Sandbox) bool {
	if in.SandboxID == "" || sb.ID != in.SandboxID {
		return false
	}
	ms, ok := strings.CutPrefix(sb.Name, destroyedPrefix+in.Name+"_")
	if !ok || ms == "" {
		return false
	}
	for _, c := range ms {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// readOurs reads the sandbox in journaled and checks that it is the one the
// intent created (mismatch): one that is not is ErrForeign, and must not be
// touched. step names the caller in the call's log and in errors.
func (r *Reaper) readOurs(ctx context.Context, p provider.Provider, in intent.Intent, step string) (provider.Sandbox, error) {
	var sb provider.Sandbox
	err := r.call(ctx, p, prioRead, provider.CallRead, step+": read sandbox "+in.SandboxID, func(ctx context.Context) (err error) {
		sb, err = p.Get(ctx, in.SandboxID)
		return err
	})
	if err != nil {
		return provider.Sandbox{}, err
	}
	if why := mismatch(in, sb); why != "" {
		return provider.Sandbox{}, fmt.Errorf("%s: sandbox %s: %w: %s", step, sb.ID, ErrForeign, why)
	}
	return sb, nil
}

// remember records that a read proved sandboxID to be in's sandbox.
func (r *Reaper) remember(in intent.Intent, sandboxID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.verified == nil || len(r.verified) >= maxVerified {
		r.verified = make(map[string]string)
	}
	r.verified[in.ID] = sandboxID
}

// isVerified reports whether in's observed sandbox was proved ours by a read.
func (r *Reaper) isVerified(in intent.Intent) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return in.SandboxID != "" && r.verified[in.ID] == in.SandboxID
}
