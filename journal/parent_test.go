package journal

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/tether-run/tether/intent"
)

// A fork's parent intent is journaled, read back as written (after a
// reopen too), left out of an intent that has none, and validated.
func TestParentIntent(t *testing.T) {
	j := openTemp(t)
	parent, _, err := j.Create(t.Context(), intent.Declaration{})
	if err != nil {
		t.Fatal(err)
	}
	fork, _, err := j.Create(t.Context(), intent.Declaration{ParentIntent: parent.ID, Name: "my-fork"})
	if err != nil || fork.ParentIntent != parent.ID {
		t.Fatalf("Create = %+v, %v; want parent %s", fork, err, parent.ID)
	}
	path := j.Path()
	j.Close()
	j, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	got, err := j.Get(fork.ID)
	if err != nil || !reflect.DeepEqual(got, fork) {
		t.Fatalf("after a reopen: %+v, %v; want %+v", got, err, fork)
	}
	if raw, _ := json.Marshal(parent); strings.Contains(string(raw), "parent_intent") {
		t.Errorf("an intent without a parent is written with one: %s", raw)
	}
	for _, bad := range []string{"not an id", "../x", "A"} {
		if _, _, err := j.Create(t.Context(), intent.Declaration{ParentIntent: bad}); !errors.Is(err, ErrInvalid) {
			t.Errorf("parent %q: %v, want ErrInvalid", bad, err)
		}
	}
	if _, _, err := j.Create(t.Context(), intent.Declaration{ID: "self", ParentIntent: "self"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("an intent its own parent: %v, want ErrInvalid", err)
	}
}
