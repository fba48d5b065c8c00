package journal

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tether-run/tether/intent"
)

func TestReplaceObserved(t *testing.T) {
	j := openTemp(t)
	in, _, _ := j.Create(t.Context(), intent.Declaration{})
	if _, err := j.ReplaceObserved(in.ID, "", "sb-real"); !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("a pending intent has no observed id to replace: %v", err)
	}
	if _, err := j.Observe(in.ID, "sb-typo"); err != nil {
		t.Fatal(err)
	}
	if _, err := j.ReplaceObserved(in.ID, "sb-other", "sb-real"); !errors.Is(err, ErrObservedOther) {
		t.Fatalf("replace must compare the observed id: %v", err)
	}
	if _, err := j.ReplaceObserved(in.ID, "sb-typo", "bad id"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad sandbox id: %v", err)
	}
	got, err := j.ReplaceObserved(in.ID, "sb-typo", "sb-real")
	if err != nil || got.SandboxID != "sb-real" || got.State != intent.Observed || !reflect.DeepEqual(got.Replaced, []string{"sb-typo"}) ||
		!strings.Contains(got.LastError, "sb-typo") {
		t.Fatalf("replace: %+v %v", got, err)
	}
	again, err := j.ReplaceObserved(in.ID, "sb-typo", "sb-real")
	if err != nil || !reflect.DeepEqual(again, got) {
		t.Fatalf("replacing by the id already recorded must change nothing: %+v %v", again, err)
	}
	// Runners still cannot change it.
	if _, err := j.Observe(in.ID, "sb-typo"); !errors.Is(err, ErrObservedOther) {
		t.Fatalf("observe after replace: %v", err)
	}
	// Durable: read back.
	if back, err := j.Get(in.ID); err != nil || !reflect.DeepEqual(back.Replaced, []string{"sb-typo"}) || back.SandboxID != "sb-real" {
		t.Fatalf("read back: %+v %v", back, err)
	}

	// Releasing keeps its state; the list is bounded.
	if _, err := j.Transition(in.ID, intent.Releasing, ""); err != nil {
		t.Fatal(err)
	}
	cur := "sb-real"
	for i := range intent.MaxReplaced + 3 {
		next := fmt.Sprintf("sb-%d", i)
		got, err = j.ReplaceObserved(in.ID, cur, next)
		if err != nil || got.State != intent.Releasing {
			t.Fatalf("replace %d: %+v %v", i, got, err)
		}
		cur = next
	}
	if len(got.Replaced) != intent.MaxReplaced || got.Replaced[intent.MaxReplaced-1] != fmt.Sprintf("sb-%d", intent.MaxReplaced+1) {
		t.Fatalf("replaced ids not bounded to the newest %d: %v", intent.MaxReplaced, got.Replaced)
	}

	// A terminal intent is left alone.
	if _, err := j.Transition(in.ID, intent.Gone, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := j.ReplaceObserved(in.ID, cur, "sb-x"); !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("replace on a gone intent: %v", err)
	}
}

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
	in, _, err := j.Create(ctx, intent.Declaration{Name: "agent-box-7"})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := j.Get(in.ID); in.Name != "agent-box-7" || got.Name != "agent-box-7" || got.Labels[intent.LabelIntent] != in.ID {
		t.Errorf("intent %+v (journaled %+v): want the runner's name and the ownership labels", in, got)
	}
	plain, _, err := j.Create(ctx, intent.Declaration{})
	if err != nil || plain.Name != intent.NamePrefix+plain.ID {
		t.Errorf("without a name: %+v, %v", plain, err)
	}
	for _, bad := range []string{"a\nb", strings.Repeat("x", intent.MaxSandboxName+1), "\x00"} {
		if _, _, err := j.Create(ctx, intent.Declaration{Name: bad}); !errors.Is(err, ErrInvalid) {
			t.Errorf("name %q: %v, want ErrInvalid", bad, err)
		}
	}
	if all, _ := j.All(); len(all) != 2 {
		t.Errorf("%d intents, want 2", len(all))
	}
}
