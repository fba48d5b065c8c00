package spooldir

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/intake"
	"github.com/tether-run/tether/internal/testutil"
)

// Pass takes what is in the directory once, as Run's first round does, and
// returns: valid files journaled and removed, an invalid one moved to
// rejected/ with its reason, and the tally says so.
func TestPassTakesTheFilesOnce(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "spool")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	spoolWrite(t, dir, "001", `{"op":"intent","id":"left-a","labels":{"team":"x"}}`)
	spoolWrite(t, dir, "002", `{"op":"observe","id":"left-a","sandbox_id":"sb-a"}`)
	spoolWrite(t, dir, "003", `{"op":"intent","id":"left-b"}`)
	spoolWrite(t, dir, "004", `{"op":"release","id":"left-b","outcome":"deleted"}`)
	spoolWrite(t, dir, "005", `{"op":"release","id":"nobody"}`)
	spoolWrite(t, dir, "006", `{"op":"delete","id":"left-a"}`)
	j := openTemp(t)
	r := &Reader{Intake: &intake.Intake{Journal: j, Provider: "daytona"}, Dir: dir}
	tally, err := r.Pass(context.Background())
	if err != nil {
		t.Fatalf("Pass: %v", err)
	}
	if want := (Tally{Taken: 5, Rejected: 1}); tally != want {
		t.Errorf("tally %+v, want %+v", tally, want)
	}
	if !spoolEmpty(dir) {
		t.Errorf("spool files left after the pass")
	}
	a, err := j.Get("left-a")
	if err != nil || a.State != intent.Observed || a.SandboxID != "sb-a" || a.Labels["team"] != "x" {
		t.Errorf("left-a: %+v, %v; want observed on sb-a (the delete op, without a provider, is the drain's)", a, err)
	}
	if b, err := j.Get("left-b"); err != nil || b.State != intent.Released {
		t.Errorf("left-b: %+v, %v; want released", b, err)
	}
	reason, err := os.ReadFile(filepath.Join(dir, RejectedDir, "005.err"))
	if err != nil || !strings.Contains(string(reason), "no intent declared") {
		t.Errorf("rejected/005.err = %q, %v; want the reason", reason, err)
	}
}

// The intents the files noted by MarkEarlier declared are Earlier's; those
// of a file renamed in after it (this run's runner) are not, though the
// same first round takes both.
func TestEarlierIsTheFilesMarkedBeforeTheChild(t *testing.T) {
	t.Parallel()
	r := &Reader{Intake: &intake.Intake{}}
	f := startIntake(t, r, func(dir string) {
		spoolWrite(t, dir, "001-old", `{"op":"intent","id":"old"}`)
		spoolWrite(t, dir, "002-old", `{"op":"observe","id":"old","sandbox_id":"sb-old"}`)
		spoolWrite(t, dir, "003-old", `{"op":"intent","id":"old-2"}`)
		r.Dir = dir
		if n, err := r.MarkEarlier(); err != nil || n != 3 {
			t.Fatalf("MarkEarlier: %d, %v; want 3 files", n, err)
		}
		// The new runner's file, before the intake's first listing.
		spoolWrite(t, dir, "000-new", `{"op":"intent","id":"new"}`)
	})
	testutil.Receive(t, "the first round", r.CaughtUp())
	if _, err := f.j.Get("new"); err != nil {
		t.Fatalf("the first round did not take the new runner's file: %v", err)
	}
	if got, want := r.Earlier(), []string{"old", "old-2"}; !slices.Equal(got, want) {
		t.Errorf("Earlier() = %v, want %v (not the new runner's intent)", got, want)
	}
}
