package intent

import "testing"

// legal is the state diagram of ARCHITECTURE.md written out by hand, so the
// table in go is checked against an independent copy.
var legal = map[[2]State]bool{
	{Pending, Observed}: true, {Pending, Releasing}: true, {Pending, Released}: true,
	{Pending, NeverCreated}: true, {Pending, Foreign}: true,
	{Observed, Observed}: true, {Observed, Releasing}: true, {Observed, Released}: true, {Observed, Foreign}: true,
	{Releasing, Releasing}: true, {Releasing, Gone}: true, {Releasing, Stopped}: true,
	{Releasing, Released}: true, {Releasing, Foreign}: true, {Releasing, NeverCreated}: true,
}

func TestCanTransitionEveryPair(t *testing.T) {
	for _, from := range AllStates() {
		for _, to := range AllStates() {
			want := legal[[2]State{from, to}]
			if got := CanTransition(from, to); got != want {
				t.Errorf("CanTransition(%s, %s) = %v, want %v", from, to, got, want)
			}
		}
	}
	if CanTransition("bogus", Pending) || CanTransition(Pending, "bogus") {
		t.Error("an unknown state must never transition")
	}
}

func TestLiveStates(t *testing.T) {
	for _, s := range AllStates() {
		want := s == Pending || s == Observed || s == Releasing
		if s.Live() != want {
			t.Errorf("%s.Live() = %v, want %v", s, s.Live(), want)
		}
	}
}

// reach drives a fresh intent into state s through the journal's own API.

// KnownState is true of every state and of nothing else.
func TestKnownState(t *testing.T) {
	for _, s := range AllStates() {
		if !KnownState(s) {
			t.Errorf("KnownState(%s) = false", s)
		}
	}
	for _, s := range []State{"", "bogus", "Pending", "gone "} {
		if KnownState(s) {
			t.Errorf("KnownState(%q) = true", s)
		}
	}
}
