package reaper_test

import (
	"context"
	"errors"
	"maps"
	"testing"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/reaper"
)

// Vouch takes a create's answer as the read that proves a sandbox ours
// only when it shows the intent's observed id, its name and every one of
// its labels. An answer that does not (here, someone else's sandbox whose
// id was observed by mistake) vouches for nothing: the drain reads the
// sandbox first, finds it foreign and leaves it untouched.
func TestVouchNeedsTheIntentsNameAndLabels(t *testing.T) {
	w := newWorld(t)
	ours := w.intent(map[string]string{"scope": "vouch"}, "")
	ours = w.observe(ours, w.create(ours).ID)
	theirs := w.createAs("someone-elses", map[string]string{"team": "other"}, nil)
	mistaken := w.observe(w.intent(map[string]string{"scope": "vouch"}, ""), theirs.ID)

	answer, err := w.prov.Get(context.Background(), theirs.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.r.Vouch(mistaken, answer); !errors.Is(err, reaper.ErrForeign) {
		t.Fatalf("vouch for a sandbox without the intent's name and labels: %v, want ErrForeign", err)
	}
	answer.Labels = maps.Clone(mistaken.Labels)
	if err := w.r.Vouch(mistaken, answer); !errors.Is(err, reaper.ErrForeign) {
		t.Fatalf("vouch for a sandbox without the intent's name: %v, want ErrForeign", err)
	}
	good, err := w.prov.Get(context.Background(), ours.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.r.Vouch(ours, good); err != nil {
		t.Fatalf("vouch for the intent's own sandbox: %v", err)
	}

	rep := w.r.Drain(context.Background(), []intent.Intent{ours, mistaken})
	if rep.Gone != 1 || len(rep.Foreign) != 1 {
		t.Fatalf("drain: %+v, want one gone and one foreign", rep)
	}
	w.assertDestroyed(ours.SandboxID)
	w.assertUntouched(theirs.ID)
}
