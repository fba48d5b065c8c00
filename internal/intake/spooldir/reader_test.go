package spooldir

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/intake"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/journal"
)

// spoolWrite writes a spool file the way the protocol says: .NAME.tmp, then
// rename to NAME.json.
func spoolWrite(t testing.TB, dir, name, content string) {
	t.Helper()
	tmp := filepath.Join(dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name+".json")); err != nil {
		t.Fatal(err)
	}
}

// spoolEmpty reports whether no NAME.json is left in dir.
func spoolEmpty(dir string) bool {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if isSpoolName(e.Name()) {
			return false
		}
	}
	return true
}

type intakeFixture struct {
	dir string
	j   *journal.Journal
	in  *Reader
}

func openTemp(t *testing.T) *journal.Journal {
	t.Helper()
	j, err := journal.Open(filepath.Join(t.TempDir(), "journal.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

func startIntake(t *testing.T, in *Reader, before func(dir string)) *intakeFixture {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "spool")
	os.MkdirAll(dir, 0o700)
	if before != nil {
		before(dir)
	}
	j := openTemp(t)
	if in.Intake == nil {
		in.Intake = &intake.Intake{}
	}
	in.Dir, in.Journal = dir, j
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := testutil.Receive(t, "the intake to stop", done); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return &intakeFixture{dir: dir, j: j, in: in}
}

func TestIntakeTakesFilesPresentBeforeStart(t *testing.T) {
	t.Parallel()
	f := startIntake(t, &Reader{Intake: &intake.Intake{Labels: map[string]string{"scope": "s"}, Provider: "daytona"}}, func(dir string) {
		spoolWrite(t, dir, "001", `{"op":"intent","id":"run-a","labels":{"team":"x"},"on_drain":"stop"}`)
		spoolWrite(t, dir, "002", `{"op":"observe","id":"run-a","sandbox_id":"sb-a"}`)
		spoolWrite(t, dir, "003", `{"op":"intent","id":"run-b"}`)
		spoolWrite(t, dir, "004", `{"op":"release","id":"run-b","outcome":"kept"}`)
	})
	testutil.WaitFor(t, "spool to empty", func() bool { return spoolEmpty(f.dir) })
	a, err := f.j.Get("run-a")
	if err != nil {
		t.Fatal(err)
	}
	if a.State != intent.Observed || a.SandboxID != "sb-a" || a.OnDrain != intent.DrainStop || a.Labels["team"] != "x" ||
		a.Labels["scope"] != "s" || a.Labels[intent.LabelIntent] != "run-a" || a.Name != "tether-run-a" || a.Provider != "daytona" {
		t.Fatalf("run-a: %+v", a)
	}
	b, _ := f.j.Get("run-b")
	if b.State != intent.Released || b.Outcome != intent.OutcomeKept {
		t.Fatalf("run-b: %+v", b)
	}
	if rej, _ := os.ReadDir(filepath.Join(f.dir, RejectedDir)); len(rej) != 0 {
		t.Fatalf("rejected: %v", rej)
	}
}

// TestIntakeLexicalOrder: files are taken by name, not by arrival; an op on
// an intent whose file sorts later is rejected, in the reverse order it works.
func TestIntakeLexicalOrder(t *testing.T) {
	t.Parallel()
	f := startIntake(t, &Reader{}, func(dir string) {
		spoolWrite(t, dir, "b-intent", `{"op":"intent","id":"late"}`)
		spoolWrite(t, dir, "a-observe", `{"op":"observe","id":"late","sandbox_id":"sb"}`)
		spoolWrite(t, dir, "d-observe", `{"op":"observe","id":"early","sandbox_id":"sb"}`)
		spoolWrite(t, dir, "c-intent", `{"op":"intent","id":"early"}`)
	})
	testutil.WaitFor(t, "spool to empty", func() bool { return spoolEmpty(f.dir) })
	late, _ := f.j.Get("late")
	early, _ := f.j.Get("early")
	if late.State != intent.Pending || early.State != intent.Observed {
		t.Fatalf("late %s, early %s", late.State, early.State)
	}
	reason, err := os.ReadFile(filepath.Join(f.dir, RejectedDir, "a-observe.err"))
	if err != nil || !strings.Contains(string(reason), "no intent declared") {
		t.Fatalf("a-observe.err: %q %v", reason, err)
	}
}

func TestIntakeRejects(t *testing.T) {
	t.Parallel()
	cases := map[string]struct{ content, says string }{
		"malformed":   {`{"op":"intent",`, "malformed JSON"},
		"not-object":  {`"intent"`, "JSON object"},
		"unknown":     {`{"op":"intent","id":"a","extra":1}`, `unknown field "extra"`},
		"bad-id":      {`{"op":"intent","id":"UPPER"}`, "[a-z0-9_-]"},
		"no-op":       {`{"id":"a"}`, "op: missing"},
		"bad-op":      {`{"op":"explode","id":"a"}`, `op "explode"`},
		"reserved":    {`{"op":"intent","id":"a","labels":{"tether-owner":"x"}}`, "reserved"},
		"bad-drain":   {`{"op":"intent","id":"a","on_drain":"keep"}`, "on_drain"},
		"extra-field": {`{"op":"observe","id":"a","sandbox_id":"s","labels":{}}`, "labels: not allowed"},
		"no-sandbox":  {`{"op":"observe","id":"a"}`, "sandbox_id"},
		"unknown-id":  {`{"op":"release","id":"nobody"}`, "no intent declared"},
		"two-values":  {`{"op":"delete","id":"a"}{}`, "more than one"},
		"too-big":     {`{"op":"intent","id":"a","labels":{"k":"` + strings.Repeat("v", MaxFileSize) + `"}}`, "larger than"},
		// A provider tether has no credentials for is the file's fault,
		// not the journal's: rejected, and the files after it taken.
		"no-provider": {`{"op":"intent","id":"b","provider":"nowhere"}`, "unknown provider"},
	}
	f := startIntake(t, &Reader{}, func(dir string) {
		for name, c := range cases {
			spoolWrite(t, dir, name, c.content)
		}
		os.Symlink("/etc/passwd", filepath.Join(dir, "link.json"))
	})
	cases["link"] = struct{ content, says string }{"", "symbolic link"}
	testutil.WaitFor(t, "spool to empty", func() bool { return spoolEmpty(f.dir) })
	for name, c := range cases {
		reason, err := os.ReadFile(filepath.Join(f.dir, RejectedDir, name+".err"))
		if err != nil || !strings.Contains(string(reason), c.says) {
			t.Errorf("%s.err = %q, %v; want it to say %q", name, reason, err, c.says)
		}
		if _, err := os.Lstat(filepath.Join(f.dir, RejectedDir, name+".json")); err != nil {
			t.Errorf("%s.json not moved to rejected/: %v", name, err)
		}
	}
	if all, _ := f.j.All(); len(all) != 0 {
		t.Fatalf("rejected files reached the journal: %+v", all)
	}
}

func TestIntakeIgnoresHalfWrittenFiles(t *testing.T) {
	t.Parallel()
	var dir string
	f := startIntake(t, &Reader{}, func(d string) {
		dir = d
		os.WriteFile(filepath.Join(d, ".half.tmp"), []byte(`{"op":"intent","id":"ha`), 0o600)
		os.WriteFile(filepath.Join(d, "notes.txt"), []byte(`not a spool file`), 0o600)
	})
	// A later complete file proves scans happened, before and after it.
	spoolWrite(t, dir, "zz", `{"op":"intent","id":"marker"}`)
	testutil.WaitFor(t, "the marker", func() bool { _, err := f.j.Get("marker"); return err == nil })
	if b, err := os.ReadFile(filepath.Join(dir, ".half.tmp")); err != nil || string(b) != `{"op":"intent","id":"ha` {
		t.Fatalf("half-written file touched: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "notes.txt")); err != nil {
		t.Fatal("a file that is not NAME.json was touched")
	}
	if rej, _ := os.ReadDir(filepath.Join(dir, RejectedDir)); len(rej) != 0 {
		t.Fatalf("rejected: %v", rej)
	}
	// Once renamed, the same file is taken.
	os.WriteFile(filepath.Join(dir, ".half.tmp"), []byte(`{"op":"intent","id":"half"}`), 0o600)
	os.Rename(filepath.Join(dir, ".half.tmp"), filepath.Join(dir, "half.json"))
	testutil.WaitFor(t, "the renamed file", func() bool { _, err := f.j.Get("half"); return err == nil })
}

func TestIntakeBurst(t *testing.T) {
	t.Parallel()
	const n = 5000
	f := startIntake(t, &Reader{}, nil)
	for i := 0; i < n; i++ {
		spoolWrite(t, f.dir, fmt.Sprintf("%05d", i), fmt.Sprintf(`{"op":"intent","id":"burst-%05d"}`, i))
	}
	testutil.WaitFor(t, "5000 intents", func() bool { c, _ := f.j.LiveCount(); return c == n })
	testutil.WaitFor(t, "spool to empty", func() bool { return spoolEmpty(f.dir) })
	live, _ := f.j.Live()
	for i, in := range live {
		if in.ID != fmt.Sprintf("burst-%05d", i) {
			t.Fatalf("intent %d is %s: not taken in lexical order", i, in.ID)
		}
	}
}

func TestIntakeIdempotentAndClientChosenID(t *testing.T) {
	t.Parallel()
	id := "01arz3ndektsv4rrffq69g5fav"
	f := startIntake(t, &Reader{}, func(dir string) {
		spoolWrite(t, dir, "1", `{"op":"intent","id":"`+id+`"}`)
		spoolWrite(t, dir, "2", `{"op":"intent","id":"`+id+`"}`) // taken twice (a crash before remove)
		spoolWrite(t, dir, "3", `{"op":"observe","id":"`+id+`","sandbox_id":"sb"}`)
		spoolWrite(t, dir, "4", `{"op":"observe","id":"`+id+`","sandbox_id":"sb"}`)
	})
	testutil.WaitFor(t, "spool to empty", func() bool { return spoolEmpty(f.dir) })
	all, _ := f.j.All()
	if len(all) != 1 || all[0].ID != id || all[0].Name != "tether-"+id || all[0].SandboxID != "sb" {
		t.Fatalf("%+v", all)
	}
	if rej, _ := os.ReadDir(filepath.Join(f.dir, RejectedDir)); len(rej) != 0 {
		t.Fatalf("rejected: %v", rej)
	}
}

func TestIntakeDeleteAndObserved(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var deleted []string
	observed := make(chan intent.Intent, 1)
	var f *intakeFixture
	f = startIntake(t, &Reader{Intake: &intake.Intake{
		Delete: func(ctx context.Context, id string) (intent.Intent, error) {
			mu.Lock()
			deleted = append(deleted, id)
			mu.Unlock()
			if _, err := f.j.Transition(id, intent.Releasing, ""); err != nil {
				return intent.Intent{}, err
			}
			return f.j.Transition(id, intent.Gone, "")
		},
		Observed: func(in intent.Intent) { observed <- in },
	}}, nil)
	spoolWrite(t, f.dir, "1", `{"op":"intent","id":"d"}`)
	spoolWrite(t, f.dir, "2", `{"op":"observe","id":"d","sandbox_id":"sb-d"}`)
	spoolWrite(t, f.dir, "3", `{"op":"delete","id":"d"}`)
	testutil.WaitFor(t, "the delete", func() bool { in, _ := f.j.Get("d"); return in.State == intent.Gone })
	in, _ := f.j.Get("d")
	mu.Lock()
	if len(deleted) != 1 || deleted[0] != "d" || in.ID != "d" {
		t.Fatalf("deleted %v", deleted)
	}
	mu.Unlock()
	select {
	case o := <-observed:
		if o.SandboxID != "sb-d" {
			t.Fatalf("observed %+v", o)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("intent.Observed not called")
	}
}

func TestIntakeStopsWhenJournalCloses(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "spool")
	j := openTemp(t)
	in := &Reader{Intake: &intake.Intake{Journal: j}, Dir: dir}
	done := make(chan error, 1)
	go func() { done <- in.Run(context.Background()) }()
	testutil.WaitFor(t, "the spool directory", func() bool { _, err := os.Stat(filepath.Join(dir, RejectedDir)); return err == nil })
	j.Close()
	spoolWrite(t, dir, "after", `{"op":"intent","id":"x"}`)
	select {
	case err := <-done:
		if !errors.Is(err, journal.ErrClosed) {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not stop")
	}
	if _, err := os.Stat(filepath.Join(dir, "after.json")); err != nil {
		t.Fatal("a file the journal never took was removed")
	}
}

// A file the child renamed in just before it exited is journaled by the
// last scan, before Run returns (and so before the drain): here ctx is over
// before the intake even starts, so only that last scan can take it.
func TestIntakeFinalScanTakesLateFiles(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "spool")
	os.MkdirAll(dir, 0o700)
	j := openTemp(t)
	spoolWrite(t, dir, "001", `{"op":"intent","id":"late","labels":{}}`)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	in := &Reader{Intake: &intake.Intake{Journal: j}, Dir: dir, WatchDelay: time.Hour, RescanInterval: time.Hour}
	if err := in.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := j.Get("late"); err != nil {
		t.Fatalf("the file written before the stop was not journaled: %v", err)
	}
	if !spoolEmpty(dir) {
		t.Fatal("the file was journaled but not removed")
	}
}

// readerLog gives in a logger into a buffer, shown if the test fails: what
// the reader did (its watcher started or not, the files it took).
func readerLog(t *testing.T, in *Reader) *testutil.Buffer {
	t.Helper()
	logs := &testutil.Buffer{}
	if in.Intake == nil {
		in.Intake = &intake.Intake{}
	}
	in.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the reader's log:\n%s", logs)
		}
	})
	return logs
}

// Files renamed in before the watcher starts (it starts after WatchDelay)
// are not missed, with no periodic rescan to fall back on. Should inotify
// be unavailable (its per-user instance limit reached by the tests of a
// loaded machine), the reader says so and polls instead, and the files are
// taken all the same; the log says which path the test took.
func TestIntakeDelayedWatcherMissesNothing(t *testing.T) {
	t.Parallel()
	in := &Reader{WatchDelay: 50 * time.Millisecond, RescanInterval: time.Hour}
	logs := readerLog(t, in)
	f := startIntake(t, in, nil)
	for i := 0; i < 3; i++ {
		spoolWrite(t, f.dir, fmt.Sprintf("%03d", i), fmt.Sprintf(`{"op":"intent","id":"early-%d","labels":{}}`, i))
	}
	testutil.WaitFor(t, "the early files journaled", func() bool { n, _ := f.j.LiveCount(); return n == 3 })
	// And after the watcher is up, events drive the intake.
	spoolWrite(t, f.dir, "100", `{"op":"intent","id":"later","labels":{}}`)
	testutil.WaitFor(t, "the later file journaled", func() bool { _, err := f.j.Get("later"); return err == nil })
	if strings.Contains(logs.String(), "spool: no watcher") {
		t.Logf("inotify was unavailable; the files were taken by polling:\n%s", logs)
	}
}

// A watcher that cannot start (inotify's per-user instance limit reached,
// EMFILE): the reader says so, once, at warn level, and lists the directory
// every PollInterval instead of every RescanInterval (an hour here), so a
// file renamed in is taken at once. Nothing else takes it: the watcher is
// tried again only after an hour too.
func TestIntakeWithoutAWatcherPolls(t *testing.T) {
	t.Parallel()
	var tries atomic.Int64
	in := &Reader{WatchDelay: -1, RescanInterval: time.Hour, PollInterval: 10 * time.Millisecond, WatchRetry: time.Hour}
	in.newWatcher = func() (*fsnotify.Watcher, error) {
		tries.Add(1)
		return nil, fmt.Errorf("inotify_init1: %w", syscall.EMFILE)
	}
	logs := readerLog(t, in)
	f := startIntake(t, in, nil)
	testutil.WaitFor(t, "the reader says it has no watcher", func() bool {
		return strings.Contains(logs.String(), `level=WARN msg="spool: no watcher; polling the directory instead, and trying the watcher again"`)
	})
	if !strings.Contains(logs.String(), "poll_every=10ms") || !strings.Contains(logs.String(), "too many open files") {
		t.Errorf("the warning does not say how often it polls and why:\n%s", logs)
	}
	for i := range 3 {
		spoolWrite(t, f.dir, fmt.Sprintf("%03d", i), fmt.Sprintf(`{"op":"intent","id":"polled-%d","labels":{}}`, i))
		testutil.WaitFor(t, "the file journaled by polling", func() bool { _, err := f.j.Get(fmt.Sprint("polled-", i)); return err == nil })
	}
	if n := tries.Load(); n != 1 {
		t.Errorf("the watcher was tried %d times, want once (the retry is an hour away)", n)
	}
}

// The watcher is tried again every WatchRetry: once one starts, the reader
// says so, and events take the files (PollInterval and RescanInterval
// are an hour here; only an event can).
func TestIntakeRetriesTheWatcher(t *testing.T) {
	t.Parallel()
	var tries atomic.Int64
	in := &Reader{WatchDelay: -1, RescanInterval: time.Hour, PollInterval: time.Hour, WatchRetry: 20 * time.Millisecond}
	in.newWatcher = func() (*fsnotify.Watcher, error) {
		if tries.Add(1) <= 2 {
			return nil, fmt.Errorf("inotify_init1: %w", syscall.EMFILE)
		}
		return fsnotify.NewWatcher()
	}
	logs := readerLog(t, in)
	f := startIntake(t, in, nil)
	testutil.WaitFor(t, "the watcher started on a retry", func() bool {
		return strings.Contains(logs.String(), "spool: watcher started; polling stops")
	})
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
		t.Errorf("%d warnings, want one: the retries that failed are said at debug level:\n%s", n, logs)
	}
	spoolWrite(t, f.dir, "001", `{"op":"intent","id":"watched","labels":{}}`)
	testutil.WaitFor(t, "the file journaled on its event", func() bool { _, err := f.j.Get("watched"); return err == nil })
	if n := tries.Load(); n != 3 {
		t.Errorf("the watcher was tried %d times, want 3: two that failed, one that started", n)
	}
}
