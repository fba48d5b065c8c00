package reaper

import (
	"testing"
	"time"

	"github.com/tether-run/tether/provider"
)

// judge takes a sandbox already being destroyed as a delete in progress,
// whether its listing says a delete was accepted (desired state destroyed)
// or only shows it destroying, never as stale: the sweep does not delete it
// again, nor report "deleted" for a delete it did not make.
func TestSweepJudgeLeavesWhatIsBeingDestroyed(t *testing.T) {
	now := time.Now()
	stale := func(state string, requested bool) provider.Listed {
		return provider.Listed{
			Sandbox:        provider.Sandbox{ID: "sb-1", Name: "tether-x", State: state, CreatedAt: now.Add(-48 * time.Hour)},
			LastActivityAt: now.Add(-48 * time.Hour), DeleteRequested: requested,
		}
	}
	rule := SweepRule{OlderThan: time.Hour, IdleFor: time.Hour, markable: true}
	for _, c := range []struct {
		sb   provider.Listed
		want string
	}{
		{stale(provider.StateStarted, false), SweepDelete},
		{stale(provider.StateStarted, true), SweepInProgress},
		{stale(provider.StateDestroying, false), SweepInProgress},
		{stale(provider.StateDestroying, true), SweepInProgress},
	} {
		if got, why := rule.judge(c.sb, now); got != c.want {
			t.Errorf("state %s, delete requested %v: %s (%s), want %s", c.sb.State, c.sb.DeleteRequested, got, why, c.want)
		}
	}
}

// On a provider tether cannot label kept (E2B) no stale sandbox is
// deleted: one handed back as kept cannot be told from one whose journal
// is lost, unless the rule says to delete them all the same.
func TestSweepJudgeUnmarkable(t *testing.T) {
	now := time.Now()
	sb := provider.Listed{
		Sandbox:        provider.Sandbox{ID: "sb-1", Name: "tether-x", State: provider.StateStopped, CreatedAt: now.Add(-48 * time.Hour)},
		LastActivityAt: now.Add(-48 * time.Hour),
	}
	rule := SweepRule{OlderThan: time.Hour, IdleFor: time.Hour}
	if got, why := rule.judge(sb, now); got != SweepKeep {
		t.Errorf("unmarkable: %s (%s), want keep", got, why)
	}
	rule.Unmarkable = true
	if got, why := rule.judge(sb, now); got != SweepDelete {
		t.Errorf("with Unmarkable: %s (%s), want delete", got, why)
	}
}
