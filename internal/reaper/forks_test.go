package reaper

import (
	"slices"
	"testing"

	"github.com/tether-run/tether/intent"
)

// The drain hands out forks before the sandboxes they were forked from,
// deepest first, and everything else in the order given.
func TestForksFirst(t *testing.T) {
	t.Parallel()
	intents := []intent.Intent{
		{ID: "a"},                     // 0: a parent
		{ID: "b"},                     // 1: unrelated
		{ID: "c", ParentIntent: "a"},  // 2: a's fork
		{ID: "d", ParentIntent: "c"},  // 3: a fork of the fork
		{ID: "e", ParentIntent: "zz"}, // 4: a fork of a sandbox not in this drain
	}
	got := forksFirst(intents)
	if want := []int{3, 2, 4, 0, 1}; !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	plain := []intent.Intent{{ID: "x"}, {ID: "y"}}
	if got := forksFirst(plain); !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("order without forks %v", got)
	}
}
