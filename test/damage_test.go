package e2e_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/journal"
)

// Damaged journals, as the issue reproduced them: truncated, pages
// overwritten with random bytes, one damaged record, emptied. tether must
// refuse clearly (exit 125, what to do, the child never runs) or carry on
// with what is sound; `tether drain --salvage-to` must resolve what it can
// read; and nothing acknowledged may be lost silently. Judged by the
// simulator's record of each sandbox.

// damagedIntents is how many observed intents the journal holds, each with
// a sandbox in the simulator: a journal file of 256 KiB, as in the issue.
const damagedIntents = 120

// acknowledged journals damagedIntents intents, as a runner would have them
// acknowledged, each with its sandbox started in the simulator.
func (w *world) acknowledged() map[string]intent.Intent {
	w.t.Helper()
	j, err := journal.Open(w.journal, journal.Options{})
	if err != nil {
		w.t.Fatal(err)
	}
	defer j.Close()
	out := map[string]intent.Intent{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, damagedIntents)
	for i := range damagedIntents {
		wg.Go(func() {
			in, _, err := j.Create(w.t.Context(), intent.Declaration{Labels: map[string]string{"e2e": "yes", "n": fmt.Sprint(i), "pad": strings.Repeat("p", 150)}})
			if err != nil {
				errs <- err
				return
			}
			sb := w.plantOurs(in.Name, in.Labels)
			in, err = j.Observe(in.ID, sb.ID)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			out[in.ID] = in
			mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		w.t.Fatal(err)
	}
	if fi, err := os.Stat(w.journal); err == nil {
		w.t.Logf("journal of %d intents: %d KiB", len(out), fi.Size()>>10)
	}
	return out
}

// childRan runs `tether run -- touch FILE` and reports its exit code and
// stderr, and whether the child ran.
func (w *world) childRan(args ...string) (code int, stderr string, ran bool) {
	w.t.Helper()
	touched := filepath.Join(w.dir, "child-ran")
	os.Remove(touched)
	argv := append(w.tetherArgs("run"), args...)
	code, stderr = w.runTether(append(argv, "--drain-timeout", drainTimeout, "--", "touch", touched)...)
	_, err := os.Stat(touched)
	return code, stderr, err == nil
}

// refused: tether run on the journal exits 125 with advice, and the child
// never runs; the file is left as it was.
func (w *world) refused(advice ...string) {
	w.t.Helper()
	before, _ := os.ReadFile(w.journal)
	code, stderr, ran := w.childRan()
	if code != 125 || ran {
		w.t.Fatalf("tether run on a damaged journal: exit %d (want 125), child ran %v; stderr:\n%s", code, ran, stderr)
	}
	if strings.Contains(stderr, "panic") || strings.Contains(stderr, "goroutine") {
		w.t.Fatalf("tether panicked:\n%s", stderr)
	}
	for _, a := range advice {
		if !strings.Contains(stderr, a) {
			w.t.Errorf("stderr does not say %q:\n%s", a, stderr)
		}
	}
	if after, _ := os.ReadFile(w.journal); !bytes.Equal(before, after) {
		w.t.Error("tether changed the damaged journal")
	}
}

// salvageAndDrain runs `tether drain --salvage-to` and checks, in the
// simulator, that every intent it salvaged had its sandbox deleted and that
// every acknowledged intent is either salvaged or damaged beyond reading.
func (w *world) salvageAndDrain(acked map[string]intent.Intent) (salvaged map[string]intent.Intent) {
	w.t.Helper()
	dst := filepath.Join(w.dir, "salvaged.db")
	code, stderr := w.runTether("drain", "--journal", w.journal, "--salvage-to", dst, "--drain-timeout", drainTimeout)
	if code != 0 && code != 3 {
		w.t.Fatalf("tether drain --salvage-to exited %d; stderr:\n%s", code, stderr)
	}
	if !strings.Contains(stderr, "tether: salvage: ") {
		w.t.Fatalf("no salvage report:\n%s", stderr)
	}
	j, err := journal.Open(dst, journal.Options{})
	if err != nil {
		w.t.Fatalf("open the salvaged journal: %v", err)
	}
	defer j.Close()
	if j.Owner() != w.owner {
		w.t.Fatalf("salvaged journal owner %s, want %s", j.Owner(), w.owner)
	}
	all, err := j.All()
	if err != nil {
		w.t.Fatal(err)
	}
	salvaged = map[string]intent.Intent{}
	var destroyed []string
	for _, in := range all {
		if _, ok := acked[in.ID]; !ok {
			w.t.Errorf("salvaged intent %s was never acknowledged", in.ID)
		}
		salvaged[in.ID] = in
		destroyed = append(destroyed, acked[in.ID].SandboxID)
	}
	w.assertDestroyed(destroyed...)
	if len(salvaged) == 0 {
		w.t.Fatalf("nothing salvaged; stderr:\n%s", stderr)
	}
	live, _ := j.Live()
	if len(live) > 0 && code != 3 {
		w.t.Errorf("%d intents left live, but exit %d", len(live), code)
	}
	w.t.Logf("salvaged %d of %d acknowledged intents", len(salvaged), len(acked))
	return salvaged
}

func TestTruncatedJournal(t *testing.T) {
	t.Parallel()
	for _, kib := range []int64{8, 16, 64, 128} {
		t.Run(fmt.Sprintf("%dKiB", kib), func(t *testing.T) {
			w := newWorld(t)
			acked := w.acknowledged()
			if err := os.Truncate(w.journal, kib<<10); err != nil {
				t.Fatal(err)
			}
			w.refused("damaged", "truncated", "--salvage-to")
			if kib >= 64 {
				w.salvageAndDrain(acked)
			}
		})
	}
}

func TestJournalWithRandomPages(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	acked := w.acknowledged()
	b, err := os.ReadFile(w.journal)
	if err != nil {
		t.Fatal(err)
	}
	// The root page of the newest header is surely read; two more at random.
	const pageSize = 4096
	meta := func(p int) (txid, root uint64) {
		m := b[p*pageSize+16:]
		return binary.NativeEndian.Uint64(m[48:]), binary.NativeEndian.Uint64(m[16:])
	}
	tx0, root := meta(0)
	if tx1, root1 := meta(1); tx1 > tx0 {
		root = root1
	}
	rng := rand.New(rand.NewPCG(7, 7))
	pages := []uint64{root, 2 + rng.Uint64N(uint64(len(b)/pageSize-2)), 2 + rng.Uint64N(uint64(len(b)/pageSize-2))}
	for _, p := range pages {
		for i := range pageSize {
			b[int(p)*pageSize+i] = byte(rng.Uint())
		}
	}
	os.WriteFile(w.journal, b, 0o600)
	w.refused("damaged", "--salvage-to")
	w.salvageAndDrain(acked)
}

// TestOneBadRecord: eight damaged bytes in one record. tether runs, the
// other sandboxes are deleted, the damaged one is quarantined and
// reported by name, and `tether drain` keeps saying so (exit 3).
func TestOneBadRecord(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	acked := w.acknowledged()
	var victim intent.Intent
	for _, in := range acked {
		victim = in
		break
	}
	b, _ := os.ReadFile(w.journal)
	needle := []byte(`{"id":"` + victim.ID + `"`)
	for i := bytes.Index(b, needle); i >= 0; i = bytes.Index(b, needle) {
		copy(b[i+1:], "\x00\xff#!@$%^")
	}
	os.WriteFile(w.journal, b, 0o600)

	code, stderr, ran := w.childRan()
	if code != 0 || !ran {
		t.Fatalf("tether run with one damaged record: exit %d, child ran %v; stderr:\n%s", code, ran, stderr)
	}
	for _, want := range []string{"quarantined", victim.Name} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not say %q:\n%s", want, stderr)
		}
	}
	var others []string
	for id, in := range acked {
		if id != victim.ID {
			others = append(others, in.SandboxID)
		}
	}
	w.assertDestroyed(others...)
	if sb, _ := w.sim.Sandbox(victim.SandboxID); sb.DeleteRequested {
		t.Errorf("the quarantined intent's sandbox was deleted on a guess")
	}
	code, stderr = w.runTether("drain", "--journal", w.journal)
	if code != 3 || !strings.Contains(stderr, "quarantined: "+victim.Name) {
		t.Fatalf("tether drain with a quarantined record: exit %d (want 3); stderr:\n%s", code, stderr)
	}
}

// TestEmptiedJournal: a journal truncated to 0 bytes after use is refused,
// loudly; one that was never written to (a crash right after its creation)
// is set up as new.
func TestEmptiedJournal(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.acknowledged()
	if err := os.Truncate(w.journal, 0); err != nil {
		t.Fatal(err)
	}
	w.refused("empty", w.owner, w.journal+journal.MarkerSuffix)
	if code, stderr := w.runTether("drain", "--journal", w.journal); code != 125 || !strings.Contains(stderr, "empty") {
		t.Fatalf("tether drain of an emptied journal: exit %d, stderr:\n%s", code, stderr)
	}

	fresh := filepath.Join(w.dir, "fresh.db")
	os.WriteFile(fresh, nil, 0o600)
	code, stderr := w.runTether("run", "--journal", fresh, "--socket", w.socket, "--spool", w.spool, "--", "true")
	if code != 0 {
		t.Fatalf("tether run on a journal never written to: exit %d; stderr:\n%s", code, stderr)
	}
}
