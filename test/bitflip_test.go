package e2e_test

import (
	"strings"
	"testing"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/journal"
)

// TestFlippedBitsInRecords, as the issue reproduced it: one bit flipped in
// a pending intent's name and in two observed intents' owner labels, all
// three sandboxes running. Believed, the drain would close the first as
// never-created and the others as foreign and report "0 left live". The
// checksums catch all three: quarantined, reported by name, unresolved
// (exit 3), and no sandbox touched, in the simulator's own record.
func TestFlippedBitsInRecords(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	j, err := journal.Open(w.journal, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var victims []intent.Intent
	var sandboxes []string
	for i := range 3 {
		in, _, err := j.Create(t.Context(), intent.Declaration{Labels: map[string]string{"e2e": "yes"}})
		if err != nil {
			t.Fatal(err)
		}
		sb := w.plantOurs(in.Name, in.Labels)
		sandboxes = append(sandboxes, sb.ID)
		if i > 0 {
			if in, err = j.Observe(in.ID, sb.ID); err != nil {
				t.Fatal(err)
			}
		}
		victims = append(victims, in)
	}
	healthy, _, err := j.Create(t.Context(), intent.Declaration{Labels: map[string]string{"e2e": "yes"}})
	if err != nil {
		t.Fatal(err)
	}
	sb := w.plantOurs(healthy.Name, healthy.Labels)
	if healthy, err = j.Observe(healthy.ID, sb.ID); err != nil {
		t.Fatal(err)
	}
	j.Close()

	testutil.FlipBitAfter(t, w.journal, victims[0].ID, `"name":"tether-`)
	testutil.FlipBitAfter(t, w.journal, victims[1].ID, `"`+intent.LabelOwner+`":"`)
	testutil.FlipBitAfter(t, w.journal, victims[2].ID, `"`+intent.LabelOwner+`":"`)

	code, stderr := w.runTether("drain", "--journal", w.journal, "--drain-timeout", drainTimeout, "--never-created-after", "1ms")
	if code != 3 {
		t.Fatalf("tether drain: exit %d, want 3 (quarantined records are unresolved); stderr:\n%s", code, stderr)
	}
	for _, in := range victims {
		if !strings.Contains(stderr, "tether: quarantined: "+in.Name+"  ") || !strings.Contains(stderr, "checksum mismatch") {
			t.Errorf("stderr does not report %s quarantined by its checksum:\n%s", in.Name, stderr)
		}
	}
	rep := mustReport(t, stderr)
	if rep.counts["never-created"] != 0 || rep.counts["foreign"] != 0 || len(rep.foreign) != 0 || rep.counts["gone"] != 1 {
		t.Errorf("report %+v; want the healthy intent gone, nothing never-created or foreign", rep)
	}
	for _, id := range sandboxes {
		if sb, ok := w.sim.Sandbox(id); !ok || sb.DeleteRequested || sb.State != "started" {
			t.Errorf("sandbox %s: %+v; a quarantined intent's sandbox must be left running", id, sb)
		}
	}
	w.assertDestroyed(healthy.SandboxID)
	w.assertJournal(intent.Gone, healthy.ID)
}
