package spool

import (
	"errors"
	"fmt"
	"testing"
)

var allStates = []State{Pending, Observed, Releasing, Gone, Stopped, Released, NeverCreated, Foreign}

// legal is the state diagram of ARCHITECTURE.md written out by hand, so the
// table in intent.go is checked against an independent copy.
var legal = map[[2]State]bool{
	{Pending, Observed}: true, {Pending, Releasing}: true, {Pending, Released}: true,
	{Pending, NeverCreated}: true, {Pending, Foreign}: true,
	{Observed, Observed}: true, {Observed, Releasing}: true, {Observed, Released}: true, {Observed, Foreign}: true,
	{Releasing, Releasing}: true, {Releasing, Gone}: true, {Releasing, Stopped}: true,
	{Releasing, Released}: true, {Releasing, Foreign}: true, {Releasing, NeverCreated}: true,
}

func TestCanTransitionEveryPair(t *testing.T) {
	for _, from := range allStates {
		for _, to := range allStates {
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
	for _, s := range allStates {
		want := s == Pending || s == Observed || s == Releasing
		if s.Live() != want {
			t.Errorf("%s.Live() = %v, want %v", s, s.Live(), want)
		}
	}
}

// reach drives a fresh intent into state s through the journal's own API.
func reach(t *testing.T, j *Journal, s State) Intent {
	t.Helper()
	in, _, err := j.Create(t.Context(), NewIntent{})
	if err != nil {
		t.Fatal(err)
	}
	steps := map[State][]State{
		Pending:      nil,
		Observed:     {Observed},
		Releasing:    {Releasing},
		Gone:         {Releasing, Gone},
		Stopped:      {Releasing, Stopped},
		Released:     {Released},
		NeverCreated: {NeverCreated},
		Foreign:      {Foreign},
	}[s]
	for _, st := range steps {
		switch st {
		case Observed:
			in, err = j.Observe(in.ID, "sb-"+in.ID)
		case Released:
			in, err = j.Release(in.ID, OutcomeDeleted)
		default:
			in, err = j.Transition(in.ID, st, "")
		}
		if err != nil {
			t.Fatalf("reach %s: %v", s, err)
		}
	}
	if in.State != s {
		t.Fatalf("reach %s: got %s", s, in.State)
	}
	return in
}

// TestJournalTransitionEveryPair drives every pair through the journal: a
// legal move is stored, an illegal one is refused and changes nothing.
func TestJournalTransitionEveryPair(t *testing.T) {
	j := openTemp(t)
	for _, from := range allStates {
		for _, to := range allStates {
			t.Run(fmt.Sprintf("%s-%s", from, to), func(t *testing.T) {
				in := reach(t, j, from)
				got, err := j.Transition(in.ID, to, "why")
				if legal[[2]State{from, to}] {
					if err != nil || got.State != to || got.LastError != "why" {
						t.Fatalf("legal move: got %+v, %v", got, err)
					}
				} else if !errors.Is(err, ErrIllegalTransition) {
					t.Fatalf("illegal move: got err %v", err)
				}
				stored, err := j.Get(in.ID)
				if err != nil {
					t.Fatal(err)
				}
				want := from
				if legal[[2]State{from, to}] {
					want = to
				}
				if stored.State != want {
					t.Fatalf("stored state %s, want %s", stored.State, want)
				}
				if stored.Live() != want.Live() {
					t.Fatal("live flag out of step")
				}
				live, err := j.Live()
				if err != nil {
					t.Fatal(err)
				}
				found := false
				for _, l := range live {
					found = found || l.ID == in.ID
				}
				if found != want.Live() {
					t.Fatalf("in Live() = %v, want %v", found, want.Live())
				}
			})
		}
	}
}
