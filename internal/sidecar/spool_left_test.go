package sidecar

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/intake/spooldir"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// A runner declared an intent in a spool file and created its sandbox;
// tether died before it took the file. The next run's boot replay resolves
// that intent while the new child runs, as it does what the journal held
// live: the spool intake's first round journals the file, and the replay
// takes the intents declared by the files there before the child started.
// A file the new runner writes is not the replay's, though the same round
// takes it: its sandbox lives until the child ends, and the drain then
// deletes it.
func TestReplayTakesTheIntentsLeftInTheSpool(t *testing.T) {
	w := newWorld(t)
	w.cfg.DaytonaProxy = false
	owner := w.journalOwner()
	old := w.leftInSpool(owner, "old")
	sc := w.open() // the replay's list and the spool's mark are taken here
	fresh := w.leftInSpool(owner, "fresh")

	// The child lives until the replay is done, or the bound passes.
	marker := filepath.Join(w.dir, "replayed")
	type seen struct {
		replayed    bool
		oldGone     string
		freshLiving string
	}
	during := make(chan seen, 1)
	go func() {
		defer os.WriteFile(marker, nil, 0o600)
		var s seen
		s.replayed = testutil.Poll(func() bool { return strings.Contains(w.log.String(), "replay: done") })
		if ok, why := w.deleted(old); !ok {
			s.oldGone = why
		}
		if sb, _ := w.srv.Sandbox(fresh); sb.DeleteRequested {
			s.freshLiving = "delete requested, deleted by " + sb.DeletedBy
		}
		during <- s
	}()
	if _, err := w.run(sc, "/bin/sh", "-c", `while [ ! -e "$0" ]; do sleep 0.01; done`, marker); err != nil {
		t.Fatalf("Run: %v", err)
	}
	s := <-during
	if !s.replayed {
		t.Errorf("no boot replay was done within %s while the child ran", testutil.WaitBound)
	}
	if s.oldGone != "" {
		t.Errorf("sandbox %s (declared in a spool file an earlier runner left) after the replay, the child still running: %s; want deleted by the replay", old, s.oldGone)
	}
	if s.freshLiving != "" {
		t.Errorf("sandbox %s (the new runner's) was deleted while the child ran (%s): the replay took an intent of this run", fresh, s.freshLiving)
	}
	for _, id := range []string{old, fresh} {
		if sb, _ := w.srv.Sandbox(id); sb.State != "destroyed" || !strings.HasPrefix(sb.DeletedBy, daytonatest.DeletedByAPI) {
			t.Errorf("sandbox %s after the run: %s, deleted by %q; want destroyed by tether's DELETE", id, sb.State, sb.DeletedBy)
		}
	}
	for _, id := range []string{"old", "fresh"} {
		if in, err := sc.Journal().Get(id); err != nil || in.State != intent.Gone {
			t.Errorf("intent %s after the run: %s, %v; want gone", id, in.State, err)
		}
	}
}

// `tether drain` takes the spool files a dead runner left before it drains:
// the release of a sandbox the runner deleted itself (without it the intent
// closes as never-created, a sandbox that existed), the declaration of a
// sandbox the journal never heard of (without it the sandbox leaks), and a
// file it refuses, moved to rejected/ with its reason.
func TestDrainTakesTheSpoolFirst(t *testing.T) {
	w := newWorld(t)
	w.cfg.DaytonaProxy = false
	// The intents are older than the horizon: a name absent closes at once.
	w.cfg.NeverCreatedHorizon = time.Millisecond
	released := w.declareAndDie(func(sc *Sidecar) intent.Intent {
		in, _, err := sc.intake.Declare(context.Background(), sc.intake.NewIntent(map[string]string{"job": "released"}, intent.DrainDelete, "", ""))
		if err != nil {
			t.Fatalf("declare: %v", err)
		}
		return in
	})
	deletedByRunner := w.runnerCreatesAndDeletes(released)
	if _, err := spooldir.Write(w.cfg.Spool, spooldir.FileOp{Op: spooldir.OpRelease, ID: released.ID, Outcome: intent.OutcomeDeleted}); err != nil {
		t.Fatal(err)
	}
	leaked := w.leftInSpool(w.journalOwner(), "leaked")
	if _, err := spooldir.Write(w.cfg.Spool, spooldir.FileOp{Op: spooldir.OpObserve, ID: "nobody", SandboxID: "sb"}); err != nil {
		t.Fatal(err)
	}

	if err := w.drain(); err != nil {
		t.Fatalf("drain: %v", err)
	}
	got, err := w.journalGet(released.ID)
	if err != nil || got.State != intent.Released || got.Outcome != intent.OutcomeDeleted {
		t.Errorf("intent %s: %s (%s), outcome %q, %v; want released as deleted: its runner deleted sandbox %s and said so in the spool",
			released.ID, got.State, got.LastError, got.Outcome, err, deletedByRunner)
	}
	if sb, _ := w.srv.Sandbox(deletedByRunner); sb.DeletedBy != daytonatest.DeletedByAPI+runnerAgent {
		t.Errorf("sandbox %s: deleted by %q; want the runner alone", deletedByRunner, sb.DeletedBy)
	}
	if ok, why := w.deleted(leaked); !ok {
		t.Errorf("sandbox %s, declared only in a spool file: %s; want deleted by the drain", leaked, why)
	}
	if got, err := w.journalGet("leaked"); err != nil || got.State != intent.Gone {
		t.Errorf("intent leaked: %s, %v; want gone", got.State, err)
	}
	left, _ := filepath.Glob(filepath.Join(w.cfg.Spool, "*.json"))
	rejected, _ := filepath.Glob(filepath.Join(w.cfg.Spool, spooldir.RejectedDir, "*.err"))
	if len(left) != 0 || len(rejected) != 1 {
		t.Errorf("spool after the drain: %v left, %v rejected; want none left and the observe of nobody rejected", left, rejected)
	}
}

// A spool directory that does not exist is said and skipped, not created;
// one others may write to is refused, as tether run refuses it, naming the
// setting, and nothing in it is taken.
func TestDrainSpoolDirectoryMissingOrRefused(t *testing.T) {
	w := newWorld(t)
	w.cfg.Spool = filepath.Join(w.dir, "none")
	if err := w.drain(); err != nil {
		t.Fatalf("drain: %v", err)
	}
	if _, err := os.Stat(w.cfg.Spool); !os.IsNotExist(err) {
		t.Errorf("the drain made the spool directory %s (%v)", w.cfg.Spool, err)
	}
	if !strings.Contains(w.log.String(), "no spool directory") {
		t.Errorf("the drain did not say the spool directory is missing:\n%s", w.log.String())
	}

	w.cfg.Spool = filepath.Join(w.dir, "open")
	w.leftInSpool(w.journalOwner(), "planted")
	if err := os.Chmod(w.cfg.Spool, 0o777); err != nil {
		t.Fatal(err)
	}
	err := w.drain()
	if err == nil || !strings.Contains(err.Error(), "--spool") {
		t.Errorf("drain with a spool directory anyone may write: %v; want it refused, naming --spool", err)
	}
	if in, err := w.journalGet("planted"); err == nil {
		t.Errorf("the drain took a file from a directory it refuses: intent %s is %s", in.ID, in.State)
	}
}

// drain is `tether drain` on w's journal and spool: TakeSpool, then
// DrainProviders.
func (w *world) drain() error {
	w.t.Helper()
	log := slog.New(slog.NewTextHandler(&w.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	j, err := OpenJournal(w.cfg, log)
	if err != nil {
		w.t.Fatalf("OpenJournal: %v", err)
	}
	defer j.Close()
	ps := OpenProviders(w.cfg, log)
	ctx, cancel := context.WithTimeout(context.Background(), 2*testutil.WaitBound)
	defer cancel()
	if err := TakeSpool(ctx, w.cfg, j, ps, log); err != nil {
		return err
	}
	_, err = DrainProviders(ctx, w.cfg, j, ps, log, &w.log)
	return err
}

// journalOwner opens w's journal (creating it) for its owner id.
func (w *world) journalOwner() string {
	w.t.Helper()
	j, err := journal.Open(w.cfg.Journal, journal.Options{})
	if err != nil {
		w.t.Fatal(err)
	}
	defer j.Close()
	return j.Owner()
}

// journalGet reads intent id from w's journal, closed after.
func (w *world) journalGet(id string) (intent.Intent, error) {
	w.t.Helper()
	j, err := journal.Open(w.cfg.Journal, journal.Options{})
	if err != nil {
		w.t.Fatal(err)
	}
	defer j.Close()
	return j.Get(id)
}

// leftInSpool is a runner that declares intent id in a spool file and
// creates its sandbox, labelled as tether would have it, for journal owner;
// it returns the sandbox id.
func (w *world) leftInSpool(owner, id string) string {
	w.t.Helper()
	if err := os.MkdirAll(w.cfg.Spool, 0o700); err != nil {
		w.t.Fatal(err)
	}
	labels := map[string]string{"job": id}
	if _, err := spooldir.Write(w.cfg.Spool, spooldir.FileOp{Op: spooldir.OpIntent, ID: id, Labels: labels, OnDrain: intent.DrainDelete}); err != nil {
		w.t.Fatal(err)
	}
	labels = intent.MergeLabels(w.cfg.Labels, labels, map[string]string{intent.LabelOwner: owner, intent.LabelIntent: id})
	sb, err := w.srv.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Name: intent.NamePrefix + id, Labels: labels})
	if err != nil {
		w.t.Fatal(err)
	}
	return sb.ID
}

// A tether drain of another journal while a tether run takes the same
// spool directory leaves its files to the run: they are its runner's, and
// taken into the drain's journal they would be drained from under it.
// Once the run's reader is gone, a drain takes them.
func TestDrainLeavesALiveRunsSpool(t *testing.T) {
	w := newWorld(t)
	w.cfg.Spool = filepath.Join(w.dir, "shared")
	w.leftInSpool(w.journalOwner(), "runs")
	live := &spooldir.Reader{Dir: w.cfg.Spool}
	if err := live.Open(); err != nil {
		t.Fatal(err)
	}
	if err := (&spooldir.Reader{Dir: w.cfg.Spool}).Open(); !errors.Is(err, spooldir.ErrBusy) {
		t.Fatalf("a second reader of a taken spool directory: %v, want ErrBusy", err)
	}
	if err := w.drain(); err != nil {
		t.Fatalf("drain: %v", err)
	}
	if in, err := w.journalGet("runs"); err == nil {
		t.Errorf("the drain took the live run's file: intent %s is %s", in.ID, in.State)
	}
	if !strings.Contains(w.log.String(), "they are left to it") {
		t.Errorf("the drain did not say it left the spool to the live tether:\n%s", w.log.String())
	}
	live.Close()
	if err := w.drain(); err != nil {
		t.Fatalf("drain after the run: %v", err)
	}
	if _, err := w.journalGet("runs"); err != nil {
		t.Errorf("the drain after the run did not take the file: %v", err)
	}
}
