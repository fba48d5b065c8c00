package e2b_test

import (
	"context"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/provider/e2b"
	"github.com/tether-run/tether/provider/e2b/e2btest"
)

// A runner's name also carried by another owner's sandbox, started first:
// the intent whose create's answer was lost takes the sandbox that is its
// own by every label, not the first started, and the other is untouched.
func TestDrainSharedNameTakesOwnNotFirst(t *testing.T) {
	clock := e2btest.NewManualClock(time.Now())
	w := newDrainWorld(t, e2btest.WithClock(clock.Now))
	in, _, err := w.j.Create(context.Background(), intent.Declaration{
		Labels: map[string]string{"scope": "s1"}, Provider: e2b.ProviderName, Account: w.p.Account(), Name: "job-1",
	})
	if err != nil {
		t.Fatal(err)
	}
	other := w.srv.AddSandbox(e2btest.DefaultTeam, e2btest.SeedSandbox{Timeout: 10 * time.Minute,
		Metadata: map[string]string{e2b.MetadataName: "job-1", intent.LabelOwner: "another-tether", "scope": "s1"}})
	clock.Advance(time.Millisecond) // ours starts strictly later
	ours, err := w.p.Create(ctx, in.Name, in.Labels, e2b.CreateOptions{Timeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	out, err := w.resolve(in) // never observed: the answer was lost
	if err != nil || out.State != intent.Gone || out.SandboxID != ours.ID {
		t.Fatalf("Resolve = %s on %q, %v; want gone on its own %s", out.State, out.SandboxID, err, ours.ID)
	}
	if f := w.fate(ours.ID); f.State != e2btest.StateKilled {
		t.Errorf("the intent's sandbox: %s, want killed", f.State)
	}
	if f := w.fate(other.ID); f.State != e2btest.StateRunning {
		t.Errorf("another owner's sandbox of the same name: %s, want running", f.State)
	}
}

// A lost fork's intent never takes the sandbox another live intent of its
// name observed, though it carries the same name and labels: it takes the
// one no intent holds.
func TestDrainLostForkSkipsAnObservedOne(t *testing.T) {
	w := newDrainWorld(t)
	parent := w.observedParent()
	known := w.lostForks(parent, 1)[0]
	first := w.forksOf(parent.SandboxID)[0].ID
	if _, err := w.j.Observe(known.ID, first); err != nil {
		t.Fatal(err)
	}
	lost := w.lostForks(parent, 1)[0]
	var second string
	for _, sb := range w.forksOf(parent.SandboxID) {
		if sb.ID != first {
			second = sb.ID
		}
	}
	out, err := w.resolve(lost)
	if err != nil || out.State != intent.Gone || out.SandboxID != second {
		t.Fatalf("Resolve = %s on %q, %v; want gone on the free fork %s", out.State, out.SandboxID, err, second)
	}
	if f := w.fate(first); f.State != e2btest.StateRunning {
		t.Errorf("the fork another intent observed: %s, want running (its intent is not drained)", f.State)
	}
	if f := w.fate(second); f.State != e2btest.StateKilled {
		t.Errorf("the lost fork: %s, want killed", f.State)
	}
}
