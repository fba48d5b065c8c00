package journal

import (
	"errors"
	"fmt"
	"testing"

	"github.com/tether-run/tether/intent"
)

func reach(t *testing.T, j *Journal, s intent.State) intent.Intent {
	t.Helper()
	in, _, err := j.Create(t.Context(), intent.Declaration{})
	if err != nil {
		t.Fatal(err)
	}
	steps := map[intent.State][]intent.State{
		intent.Pending:      nil,
		intent.Observed:     {intent.Observed},
		intent.Releasing:    {intent.Releasing},
		intent.Gone:         {intent.Releasing, intent.Gone},
		intent.Stopped:      {intent.Releasing, intent.Stopped},
		intent.Released:     {intent.Released},
		intent.NeverCreated: {intent.NeverCreated},
		intent.Foreign:      {intent.Foreign},
	}[s]
	for _, st := range steps {
		switch st {
		case intent.Observed:
			in, err = j.Observe(in.ID, "sb-"+in.ID)
		case intent.Released:
			in, err = j.Release(in.ID, intent.OutcomeDeleted)
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
	for _, from := range intent.AllStates() {
		for _, to := range intent.AllStates() {
			t.Run(fmt.Sprintf("%s-%s", from, to), func(t *testing.T) {
				in := reach(t, j, from)
				got, err := j.Transition(in.ID, to, "why")
				if intent.CanTransition(from, to) {
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
				if intent.CanTransition(from, to) {
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
