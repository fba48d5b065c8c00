package spool

import (
	"errors"
	"testing"
)

func TestCloseRefusedCreate(t *testing.T) {
	j := openTemp(t)
	in, _, err := j.Create(t.Context(), NewIntent{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := j.CloseRefusedCreate(in.ID, "refused with 401")
	if err != nil || got.State != NeverCreated || got.LastError != "refused with 401" {
		t.Fatalf("CloseRefusedCreate: %+v %v", got, err)
	}
	if read, _ := j.Get(in.ID); read.State != NeverCreated {
		t.Fatalf("journaled as %s", read.State)
	}
	// Closed: not again, and nothing else an intake asks changes it.
	if _, err := j.CloseRefusedCreate(in.ID, "again"); !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("second close: %v", err)
	}

	// An intent with a sandbox id had something created: never closed so.
	ob, _, _ := j.Create(t.Context(), NewIntent{})
	if _, err := j.Observe(ob.ID, "sb-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := j.CloseRefusedCreate(ob.ID, "x"); !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("close of an observed intent: %v", err)
	}
	if read, _ := j.Get(ob.ID); read.State != Observed || read.LastError != "" {
		t.Fatalf("observed intent changed: %+v", read)
	}
}

func TestMarkDeleteRequested(t *testing.T) {
	j := openTemp(t)
	for _, observe := range []bool{false, true} {
		in, _, err := j.Create(t.Context(), NewIntent{})
		if err != nil {
			t.Fatal(err)
		}
		if observe {
			if _, err := j.Observe(in.ID, "sb-"+in.ID); err != nil {
				t.Fatal(err)
			}
		}
		got, err := j.MarkDeleteRequested(in.ID)
		if err != nil || got.State != Releasing {
			t.Fatalf("observed=%v: %+v %v", observe, got, err)
		}
		if read, _ := j.Get(in.ID); read.State != Releasing {
			t.Fatalf("journaled as %s", read.State)
		}
	}
	rel, _, _ := j.Create(t.Context(), NewIntent{})
	if _, err := j.Release(rel.ID, OutcomeKept); err != nil {
		t.Fatal(err)
	}
	if _, err := j.MarkDeleteRequested(rel.ID); !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("released intent: %v", err)
	}
	if read, _ := j.Get(rel.ID); read.State != Released {
		t.Fatalf("released intent changed to %s", read.State)
	}
}
