package spooldir

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/intake"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/journal"
)

// failingJournal is the real journal behind the intake's narrow interface,
// whose writes fail while failing is set, as a journal on a full disk does:
// the step named by at (queueing a change, or preparing one) returns ENOSPC.
type failingJournal struct {
	intake.Journal
	at       string // "submit" or "prepare"
	failing  atomic.Bool
	attempts atomic.Int64 // writes refused while failing
}

var errDiskFull = fmt.Errorf("journal write: %w", syscall.ENOSPC)

func (f *failingJournal) fail(step string) error {
	if f.at == step && f.failing.Load() {
		f.attempts.Add(1)
		return errDiskFull
	}
	return nil
}

func (f *failingJournal) Submit(c *journal.Change) error {
	if err := f.fail("submit"); err != nil {
		return err
	}
	return f.Journal.Submit(c)
}

func (f *failingJournal) PrepareCreate(n intent.Declaration) (*journal.Change, error) {
	if err := f.fail("prepare"); err != nil {
		return nil, err
	}
	return f.Journal.PrepareCreate(n)
}

func (f *failingJournal) PrepareObserve(id, sandboxID string) (*journal.Change, error) {
	if err := f.fail("prepare"); err != nil {
		return nil, err
	}
	return f.Journal.PrepareObserve(id, sandboxID)
}

// TestJournalFailureKeepsTheFile: a spool file whose change the journal
// could not write stays in the directory (not rejected: nothing is wrong
// with it), the intake keeps running and retrying, and once the journal
// works again the file is taken, and the files after it in order.
func TestJournalFailureKeepsTheFile(t *testing.T) {
	t.Parallel()
	for _, at := range []string{"submit", "prepare"} {
		t.Run(at, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "spool")
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			j, err := journal.Open(filepath.Join(t.TempDir(), "journal.db"), journal.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { j.Close() })
			fj := &failingJournal{Journal: j, at: at}
			fj.failing.Store(true)
			// An intent, then its observation: the second refers to the
			// first, so it must not be taken (and rejected as unknown)
			// while the first is kept back.
			const id = "01jfail0000000000000000000"
			spoolWrite(t, dir, "a", fmt.Sprintf(`{"op":"intent","id":%q}`, id))
			spoolWrite(t, dir, "b", fmt.Sprintf(`{"op":"observe","id":%q,"sandbox_id":"sb-1"}`, id))

			r := &Reader{Intake: &intake.Intake{Journal: fj}, Dir: dir, RescanInterval: 10 * time.Millisecond}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- r.Run(ctx) }()
			t.Cleanup(func() {
				cancel()
				if err := testutil.Receive(t, "the intake to stop", done); err != nil {
					t.Errorf("Run: %v", err)
				}
			})

			// Several rescans meet the failing journal.
			testutil.WaitFor(t, "three refused writes", func() bool {
				select {
				case err := <-done:
					done <- nil // for the cleanup
					t.Fatalf("the intake stopped on a failing journal: %v", err)
				default:
				}
				if rej, _ := os.ReadDir(filepath.Join(dir, RejectedDir)); len(rej) != 0 {
					t.Fatalf("files rejected for the journal's failure: %v", rej)
				}
				return fj.attempts.Load() >= 3
			})
			for _, name := range []string{"a.json", "b.json"} {
				if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
					t.Errorf("%s left the spool directory while the journal failed: %v", name, err)
				}
			}
			if rej, _ := os.ReadDir(filepath.Join(dir, RejectedDir)); len(rej) != 0 {
				t.Fatalf("files rejected for the journal's failure: %v", rej)
			}
			if _, err := j.Get(id); !errors.Is(err, journal.ErrNotFound) {
				t.Fatalf("intent %s in the journal while its writes failed: %v", id, err)
			}

			fj.failing.Store(false)
			testutil.Eventually(t, "the files taken once the journal works", func() (bool, string) {
				in, err := j.Get(id)
				if err != nil || in.SandboxID != "sb-1" || !spoolEmpty(dir) {
					return false, fmt.Sprintf("intent %+v (%v), spool empty %v", in, err, spoolEmpty(dir))
				}
				return true, ""
			})
			if rej, _ := os.ReadDir(filepath.Join(dir, RejectedDir)); len(rej) != 0 {
				t.Fatalf("files rejected: %v", rej)
			}
		})
	}
}

// envCommitFails runs TestJournalFailsAtTheCommitWait's body in a child
// process of the test binary: the file size limit it sets is the whole
// process's.
const envCommitFails = "TETHER_TEST_SPOOL_COMMIT_FAILS"

// TestJournalFailsAtTheCommitWait: the journal takes the spool files'
// changes (Submit succeeds) and then fails to commit them, with an error
// that is not the files' fault — a real one, from the kernel: the journal's
// pages cannot be written past the file size limit (EFBIG, as ENOSPC on a
// full disk). The files stay in the directory, neither taken nor rejected —
// the second, an observation of the intent the first declares, is not
// rejected as naming an unknown intent though its own commit is refused —
// and once the journal can write again both are taken, in order.
func TestJournalFailsAtTheCommitWait(t *testing.T) {
	if os.Getenv(envCommitFails) == "" {
		t.Parallel()
		cmd := exec.Command(os.Args[0], "-test.run=^TestJournalFailsAtTheCommitWait$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), envCommitFails+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestJournalFailsAtTheCommitWait") {
			t.Fatalf("the child test failed (%v):\n%s", err, out)
		}
		t.Logf("the child test:\n%s", out)
		return
	}
	dir := filepath.Join(t.TempDir(), "spool")
	if err := os.MkdirAll(filepath.Join(dir, RejectedDir), 0o700); err != nil {
		t.Fatal(err)
	}
	// One change to a commit: the observation is committed apart from the
	// intent it names, after that intent's commit failed (as it is
	// whenever the committer takes the first change before the second is
	// queued).
	j, err := journal.Open(filepath.Join(t.TempDir(), "journal.db"), journal.Options{MaxBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	const id = "01jwait000000000000000000a"
	spoolWrite(t, dir, "a", fmt.Sprintf(`{"op":"intent","id":%q}`, id))
	spoolWrite(t, dir, "b", fmt.Sprintf(`{"op":"observe","id":%q,"sandbox_id":"sb-1"}`, id))

	// From here no page of the journal past its first two (its headers)
	// can be written: every commit fails, after its change was queued.
	var unlimited syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &unlimited); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: 8192, Max: unlimited.Max}); err != nil {
		t.Fatal(err)
	}
	lifted := false
	lift := func() {
		if !lifted {
			lifted = true
			if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &unlimited); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(lift)

	logs := &testutil.Buffer{}
	r := &Reader{
		Intake: &intake.Intake{Journal: j, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))},
		Dir:    dir, RescanInterval: 10 * time.Millisecond,
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := testutil.Receive(t, "the intake to stop", done); err != nil {
			t.Errorf("Run: %v", err)
		}
		if t.Failed() {
			t.Logf("the reader's log:\n%s", logs)
		}
	})
	rejected := func() []os.DirEntry {
		rej, _ := os.ReadDir(filepath.Join(dir, RejectedDir))
		return rej
	}
	testutil.Eventually(t, "three rounds meet the failing commit", func() (bool, string) {
		if rej := rejected(); len(rej) != 0 {
			t.Fatalf("files rejected for the journal's failure: %v\n%s", rej, logs)
		}
		n := strings.Count(logs.String(), "file too large")
		return n >= 3, fmt.Sprintf("%d commits refused so far", n)
	})
	if !strings.Contains(logs.String(), `msg="spool: journal failed, file left for a retry" file=a.json`) {
		t.Fatalf("the reader did not say it left a.json for a retry:\n%s", logs)
	}
	for _, name := range []string{"a.json", "b.json"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s left the spool directory while the journal could not commit: %v", name, err)
		}
	}
	if _, err := j.Get(id); !errors.Is(err, journal.ErrNotFound) {
		t.Fatalf("intent %s in the journal while its commits failed: %v", id, err)
	}

	lift()
	testutil.Eventually(t, "the files taken once the journal can write", func() (bool, string) {
		in, err := j.Get(id)
		if err != nil || in.SandboxID != "sb-1" || !spoolEmpty(dir) {
			return false, fmt.Sprintf("intent %+v (%v), spool empty %v", in, err, spoolEmpty(dir))
		}
		return true, ""
	})
	if rej := rejected(); len(rej) != 0 {
		t.Fatalf("files rejected: %v", rej)
	}
}
