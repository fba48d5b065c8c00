package spool

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// A runner's own sandbox name (the Daytona API proxy keeps it) is journaled
// as the intent's name; without one the name is tether-<id>; a name that
// is not printable, or too long, is refused before anything is written.
func TestCreateWithTheRunnersName(t *testing.T) {
	j, err := Open(filepath.Join(t.TempDir(), "journal.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	ctx := context.Background()
	in, _, err := j.Create(ctx, NewIntent{Name: "agent-box-7"})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := j.Get(in.ID); in.Name != "agent-box-7" || got.Name != "agent-box-7" || got.Labels[LabelIntent] != in.ID {
		t.Errorf("intent %+v (journaled %+v): want the runner's name and the ownership labels", in, got)
	}
	plain, _, err := j.Create(ctx, NewIntent{})
	if err != nil || plain.Name != NamePrefix+plain.ID {
		t.Errorf("without a name: %+v, %v", plain, err)
	}
	for _, bad := range []string{"a\nb", strings.Repeat("x", MaxSandboxName+1), "\x00"} {
		if _, _, err := j.Create(ctx, NewIntent{Name: bad}); !errors.Is(err, ErrInvalid) {
			t.Errorf("name %q: %v, want ErrInvalid", bad, err)
		}
	}
	if all, _ := j.All(); len(all) != 2 {
		t.Errorf("%d intents, want 2", len(all))
	}
}
