package e2e_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/journal"
)

// journalWithHistory journals ended intents (released by the runner, with
// labels of about 500 bytes) and live ones, each live one observed with its
// sandbox started in the simulator. With prune, the ended ones are pruned
// as a tether with a short retention would have, leaving the file mostly
// free. It returns the live intents and the file's size.
func (w *world) journalWithHistory(ended, live int, prune bool) (map[string]intent.Intent, int64) {
	w.t.Helper()
	j, err := journal.Open(w.journal, journal.Options{})
	if err != nil {
		w.t.Fatal(err)
	}
	defer j.Close()
	var wg sync.WaitGroup
	errs := make(chan error, ended)
	next := make(chan int, ended)
	for i := range ended {
		next <- i
	}
	close(next)
	for range 64 {
		wg.Go(func() {
			for i := range next {
				in, _, err := j.Create(w.t.Context(), intent.Declaration{Labels: map[string]string{"e2e": "yes", "n": fmt.Sprint(i),
					"pad": strings.Repeat("p", 250), "pad2": strings.Repeat("q", 250)}})
				if err == nil {
					_, err = j.Release(in.ID, intent.OutcomeDeleted)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		w.t.Fatal(err)
	}
	out := map[string]intent.Intent{}
	for range live {
		in, _, err := j.Create(w.t.Context(), intent.Declaration{Labels: map[string]string{"e2e": "yes"}})
		if err != nil {
			w.t.Fatal(err)
		}
		sb := w.plantOurs(in.Name, in.Labels)
		if in, err = j.Observe(in.ID, sb.ID); err != nil {
			w.t.Fatal(err)
		}
		out[in.ID] = in
	}
	if prune {
		if n, err := j.Prune(w.t.Context(), time.Now().Add(time.Second), 0); err != nil || n != ended {
			w.t.Fatalf("pruned %d of %d: %v", n, ended, err)
		}
	}
	fi, err := os.Stat(w.journal)
	if err != nil {
		w.t.Fatal(err)
	}
	return out, fi.Size()
}

// TestRetentionPrunesAndCompacts: `tether drain` resolves the live intents
// and prunes what ended before --retention; the next tether to open the
// journal compacts it. Judged by the simulator's record and the journal
// read back.
func TestRetentionPrunesAndCompacts(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	const ended = 4000
	live, before := w.journalWithHistory(ended, 5, false)

	// A retention longer than the journal's age prunes nothing.
	code, stderr := w.runTether("drain", "--journal", w.journal, "--drain-timeout", drainTimeout, "--retention", "1h")
	if code != 0 {
		t.Fatalf("tether drain exited %d; stderr:\n%s", code, stderr)
	}
	for _, in := range live {
		w.assertDestroyed(in.SandboxID)
	}
	if all := w.readIntents(); len(all) != ended+len(live) {
		t.Fatalf("%d intents after a drain with a retention of 1h, want all %d", len(all), ended+len(live))
	}

	// A short one prunes every ended intent, live or not a moment ago.
	// Real time, on purpose: the journal stamps each end from the wall
	// clock and the real binary prunes against its own; 10 ms puts the
	// last end past the 5 ms retention. No simulator is involved.
	time.Sleep(10 * time.Millisecond)
	code, stderr = w.runTether("drain", "--journal", w.journal, "--drain-timeout", drainTimeout, "--retention", "5ms")
	if code != 0 || !strings.Contains(stderr, "pruned ended intents") {
		t.Fatalf("tether drain --retention 5ms exited %d; stderr:\n%s", code, stderr)
	}
	if all := w.readIntents(); len(all) != 0 {
		t.Fatalf("%d intents left, want none", len(all))
	}

	// The next open compacts the file, now mostly free.
	code, stderr = w.runTether("drain", "--journal", w.journal, "--drain-timeout", drainTimeout)
	if code != 0 || !strings.Contains(stderr, "journal: compacted") {
		t.Fatalf("tether drain on a mostly free journal exited %d, or did not compact it; stderr:\n%s", code, stderr)
	}
	fi, err := os.Stat(w.journal)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size()*4 > before {
		t.Errorf("journal of %d bytes after compaction, %d before", fi.Size(), before)
	}
	if _, err := os.Lstat(w.journal + ".compact"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the compaction's copy is left: %v", err)
	}
	t.Logf("journal of %d intents: %d KiB; pruned and compacted: %d KiB", ended+len(live), before>>10, fi.Size()>>10)
}

// readIntents reads every intent of the journal without writing to it (an
// Open could compact it).
func (w *world) readIntents() []intent.Intent {
	w.t.Helper()
	j, err := journal.OpenReadOnly(w.journal, 0)
	if err != nil {
		w.t.Fatal(err)
	}
	defer j.Close()
	all, err := j.All()
	if err != nil {
		w.t.Fatal(err)
	}
	return all
}
