package journal

import (
	"errors"
	"testing"

	"github.com/tether-run/tether/intent"
)

// stored reads intent id back from the journal, so a test judges what was
// written, not what a method returned.
func stored(t *testing.T, j *Journal, id string) intent.Intent {
	t.Helper()
	in, err := j.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func TestCloseRefusedCreate(t *testing.T) {
	j := openTemp(t)
	const why = "Daytona refused the create with 403 Forbidden before creating anything"
	for _, from := range intent.AllStates() {
		t.Run(string(from), func(t *testing.T) {
			in := reach(t, j, from)
			got, err := j.CloseRefusedCreate(in.ID, why)
			// Pending, and Releasing with no sandbox observed (the drain
			// began before the refusal came back): no sandbox can exist.
			if from == intent.Pending || from == intent.Releasing {
				if err != nil || got.State != intent.NeverCreated || got.LastError != why {
					t.Fatalf("got %+v, %v", got, err)
				}
				if s := stored(t, j, in.ID); s.State != intent.NeverCreated || s.LastError != why || s.Live() {
					t.Fatalf("stored %+v", s)
				}
				return
			}
			if !errors.Is(err, ErrIllegalTransition) {
				t.Fatalf("from %s: err %v, want ErrIllegalTransition", from, err)
			}
			if s := stored(t, j, in.ID); s.State != from {
				t.Fatalf("a refused close changed the intent: %+v", s)
			}
		})
	}
	t.Run("releasing with a sandbox observed", func(t *testing.T) {
		in := reach(t, j, intent.Observed)
		if _, err := j.MarkDeleteRequested(in.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := j.CloseRefusedCreate(in.ID, why); !errors.Is(err, ErrIllegalTransition) {
			t.Fatalf("closed an intent whose sandbox was observed: %v", err)
		}
		if s := stored(t, j, in.ID); s.State != intent.Releasing || s.SandboxID != "sb-"+in.ID {
			t.Fatalf("stored %+v", s)
		}
	})
	t.Run("unknown intent", func(t *testing.T) {
		if _, err := j.CloseRefusedCreate("01arz3ndektsv4rrffq69g5fav", why); !errors.Is(err, ErrNotFound) {
			t.Fatalf("err %v, want ErrNotFound", err)
		}
	})
}

func TestMarkDeleteRequested(t *testing.T) {
	j := openTemp(t)
	for _, from := range intent.AllStates() {
		t.Run(string(from), func(t *testing.T) {
			in := reach(t, j, from)
			if from.Live() {
				// A last error from an earlier attempt is cleared: the
				// runner's delete was accepted.
				if _, err := j.Note(in.ID, "earlier failure"); err != nil {
					t.Fatal(err)
				}
			}
			got, err := j.MarkDeleteRequested(in.ID)
			if !from.Live() {
				if !errors.Is(err, ErrIllegalTransition) {
					t.Fatalf("from %s: err %v, want ErrIllegalTransition", from, err)
				}
				if s := stored(t, j, in.ID); s.State != from {
					t.Fatalf("a refused mark changed the intent: %+v", s)
				}
				return
			}
			if err != nil || got.State != intent.Releasing {
				t.Fatalf("got %+v, %v", got, err)
			}
			s := stored(t, j, in.ID)
			if s.State != intent.Releasing || s.LastError != "" || s.SandboxID != in.SandboxID || !s.Live() {
				t.Fatalf("stored %+v, was %+v", s, in)
			}
			// The runner's delete seen twice (a retried request).
			if again, err := j.MarkDeleteRequested(in.ID); err != nil || again.State != intent.Releasing {
				t.Fatalf("second mark: %+v, %v", again, err)
			}
		})
	}
}
