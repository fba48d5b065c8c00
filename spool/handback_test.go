package spool

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

// The lease an intent was declared under is journaled with it; a hand-back
// is pending from its release as kept until MarkHandedBack, which only a
// released intent takes, and which survives a reopen.
func TestHandBackIsJournaled(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	in, _, err := j.Create(context.Background(), NewIntent{Lease: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := j.Create(context.Background(), NewIntent{Lease: -1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a negative lease: %v, want ErrInvalid", err)
	}
	if in.Lease != 2 {
		t.Fatalf("lease %d, want 2", in.Lease)
	}
	if in, err = j.Observe(in.ID, "sb-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := j.MarkHandedBack(in.ID); !errors.Is(err, ErrIllegalTransition) {
		t.Errorf("marking a live intent: %v, want ErrIllegalTransition", err)
	}
	if in, err = j.Release(in.ID, OutcomeKept); err != nil || !in.HandBackPending() {
		t.Fatalf("released as kept: pending %v, %v", in.HandBackPending(), err)
	}
	if in, err = j.MarkHandedBack(in.ID); err != nil || in.HandBackPending() || !in.HandedBack {
		t.Fatalf("marked: %+v, %v", in, err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if j, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if got, err := j.Get(in.ID); err != nil || !got.HandedBack || got.Lease != 2 {
		t.Errorf("after a reopen: %+v, %v", got, err)
	}
}

// Retention never prunes a sandbox's pending hand-back: the intent has
// ended, the work has not. Once handed back it goes like any other.
func TestPruneKeepsPendingHandBacks(t *testing.T) {
	j, err := Open(filepath.Join(t.TempDir(), "journal.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	ctx := context.Background()
	declare := func(lease int) Intent {
		t.Helper()
		in, _, err := j.Create(ctx, NewIntent{Lease: lease})
		if err != nil {
			t.Fatal(err)
		}
		if _, err = j.Observe(in.ID, "sb-"+in.ID); err != nil {
			t.Fatal(err)
		}
		if in, err = j.Release(in.ID, OutcomeKept); err != nil {
			t.Fatal(err)
		}
		return in
	}
	pending, unleased := declare(2), declare(0)
	future := time.Now().Add(time.Hour)
	if n, err := j.Prune(ctx, future, 0); err != nil || n != 1 {
		t.Fatalf("pruned %d, %v; want the one without a lease", n, err)
	}
	if _, err := j.Get(unleased.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("the ended intent without a hand-back: %v, want pruned", err)
	}
	if _, err := j.Get(pending.ID); err != nil {
		t.Fatalf("the pending hand-back was pruned: %v", err)
	}
	if _, err := j.MarkHandedBack(pending.ID); err != nil {
		t.Fatal(err)
	}
	if n, err := j.Prune(ctx, future.Add(time.Hour), 0); err != nil || n != 1 {
		t.Errorf("pruned %d, %v; want the handed-back one", n, err)
	}
}
