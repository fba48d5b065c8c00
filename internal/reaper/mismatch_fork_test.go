package reaper

import (
	"strings"
	"testing"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/provider"
)

// The tether-intent a sandbox carries is its intent's, or, for a fork's
// intent, the parent's it inherited; an empty one is neither, whatever
// the intent's (empty) ParentIntent.
func TestMismatchIntentLabelOfForks(t *testing.T) {
	t.Parallel()
	const id, parent = "01j00000000000000000000001", "01j00000000000000000000000"
	for _, c := range []struct {
		name          string
		parentIntent  string
		carried, want string // want: substring of the reason; "" means ours
	}{
		{"own intent", "", id, ""},
		{"empty label, no parent", "", "", intent.LabelIntent},
		{"fork carrying its parent's", parent, parent, ""},
		{"fork carrying another's", parent, "01j00000000000000000000009", intent.LabelIntent},
		{"fork carrying an empty label", parent, "", intent.LabelIntent},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := intent.Intent{ID: id, Name: "tether-" + parent, ParentIntent: c.parentIntent,
				Labels: map[string]string{intent.LabelOwner: "own", intent.LabelIntent: id}}
			sb := provider.Sandbox{ID: "sb1", Name: in.Name, State: provider.StateStarted,
				Labels: map[string]string{intent.LabelOwner: "own", intent.LabelIntent: c.carried}}
			got := mismatch(in, sb)
			if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
				t.Fatalf("mismatch = %q, want %q", got, c.want)
			}
		})
	}
}
