package spool

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
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
