package e2e_test

import (
	"maps"
	"slices"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
	"github.com/tether-run/tether/provider/e2b"
	"github.com/tether-run/tether/provider/e2b/e2btest"
)

// The crash invariants (checkInvariants, checkAcked) read a simulator's
// record through this provider-neutral view, so that one check judges the
// Daytona cases by daytonatest's record and the E2B ones by e2btest's.

// recSandbox is one sandbox of a simulator's record.
type recSandbox struct {
	id, name, intent, state string
	// ended: deleted at somebody's request (Daytona: destroyed; E2B:
	// killed by a DELETE). A sandbox that ended otherwise (an E2B timeout)
	// was not deleted by anyone, and counts as not ended.
	ended bool
	// deleting: a delete was accepted and has not finished.
	deleting bool
	// unseen: a delete that failed took it out of every answer at once (an
	// E2B kill that failed on the node after the sandbox left the store,
	// e2btest.Sandbox.Orphaned): whoever had not learned its id by then
	// cannot tell it from one never created.
	unseen bool
}

// simRecord is what the invariants read of one or more simulators.
type simRecord interface {
	// ours: every sandbox ever made in our account under our owner or
	// carrying the crash runner's own label (a create tether let through
	// without its labels is ours too), but for the neighbours planted
	// there.
	ours() []recSandbox
	// sandbox: one sandbox by id, in our account or not.
	sandbox(id string) (recSandbox, bool)
	// checkForeign: nothing that is not ours was touched.
	checkForeign()
}

// daytonaRecord is daytonatest's record of w.
type daytonaRecord struct{ w *world }

func (r daytonaRecord) ours() []recSandbox {
	r.w.mu.Lock()
	planted := maps.Clone(r.w.foreign)
	r.w.mu.Unlock()
	var out []recSandbox
	for _, sb := range r.w.sim.Sandboxes() {
		if _, ok := planted[sb.ID]; ok || sb.Org != daytonatest.DefaultOrg || (sb.Labels[intent.LabelOwner] != r.w.owner && !runnerMade(sb.Labels)) {
			continue
		}
		out = append(out, recSandbox{id: sb.ID, name: sb.Name, intent: sb.Labels[intent.LabelIntent], state: sb.State,
			ended: sb.State == "destroyed", deleting: sb.DeleteRequested && sb.State != "destroyed"})
	}
	return out
}

func (r daytonaRecord) sandbox(id string) (recSandbox, bool) {
	sb, ok := r.w.sim.Sandbox(id)
	return recSandbox{id: sb.ID, name: sb.Name, intent: sb.Labels[intent.LabelIntent], state: sb.State, ended: sb.State == "destroyed"}, ok
}

func (r daytonaRecord) checkForeign() { r.w.checkForeignUntouched() }

// e2bRecord is e2btest's record of w.
type e2bRecord struct{ w *e2bWorld }

func (r e2bRecord) view(sb e2btest.Sandbox) recSandbox {
	state := sb.State
	if sb.KillReason != "" {
		state += " (" + sb.KillReason + ")"
	}
	return recSandbox{id: sb.ID, name: sb.Metadata[e2b.MetadataName], intent: sb.Metadata[intent.LabelIntent], state: state,
		ended:    sb.State == e2btest.StateKilled && (sb.KillReason == e2btest.KillRequest || sb.Orphaned),
		deleting: sb.State == e2btest.StateKilling, unseen: sb.Orphaned}
}

func (r e2bRecord) ours() []recSandbox {
	var out []recSandbox
	for _, sb := range r.w.e2b.Sandboxes() {
		if sb.Team == e2btest.DefaultTeam && (sb.Metadata[intent.LabelOwner] == r.w.owner || runnerMade(sb.Metadata)) && !slices.Contains(r.w.neighbours, sb.ID) {
			out = append(out, r.view(sb))
		}
	}
	return out
}

func (r e2bRecord) sandbox(id string) (recSandbox, bool) {
	sb, ok := r.w.e2b.Sandbox(id)
	return r.view(sb), ok
}

// checkForeign: the neighbours run, never sent a kill or a pause; and
// every sandbox sent a kill is of our team and our owner.
func (r e2bRecord) checkForeign() {
	t := r.w.t
	for _, sb := range r.w.e2b.Sandboxes() {
		calls := r.w.e2b.CallsFor(sb.ID)
		touched := calls[e2btest.RouteKill] + calls[e2btest.RoutePause]
		switch {
		case slices.Contains(r.w.neighbours, sb.ID) && (sb.State != e2btest.StateRunning || touched > 0):
			t.Errorf("neighbour %s (team %s, metadata %v) was touched: %s, %d kills and pauses sent to it", sb.ID, sb.Team, sb.Metadata, sb.State, touched)
		case touched > 0 && (sb.Team != e2btest.DefaultTeam || sb.Metadata[intent.LabelOwner] != r.w.owner):
			t.Errorf("sandbox %s (team %s, metadata %v) was sent %d kills and pauses but is not this tether's", sb.ID, sb.Team, sb.Metadata, touched)
		}
	}
}

// runnerMade: the crash runner created it (test/crashrunner's ownLabels).
func runnerMade(labels map[string]string) bool { return labels["runner"] == "crash" }

// records joins the records of several simulators (a world of both clouds).
type records []simRecord

func (rs records) ours() []recSandbox {
	var out []recSandbox
	for _, r := range rs {
		out = append(out, r.ours()...)
	}
	return out
}

func (rs records) sandbox(id string) (recSandbox, bool) {
	for _, r := range rs {
		if sb, ok := r.sandbox(id); ok {
			return sb, true
		}
	}
	return recSandbox{}, false
}

func (rs records) checkForeign() {
	for _, r := range rs {
		r.checkForeign()
	}
}
