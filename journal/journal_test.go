package journal

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/journal/access"
	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"
)

// envHoldJournal makes the test binary a helper process that opens the
// journal at its value, says "ready" and holds it until stdin closes.
const envHoldJournal = "TETHER_TEST_HOLD_JOURNAL"

func TestMain(m *testing.M) {
	if path := os.Getenv(envHoldJournal); path != "" {
		j, err := Open(path, Options{})
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("ready")
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		j.Close()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

func openTemp(t *testing.T) *Journal {
	t.Helper()
	j, err := Open(filepath.Join(t.TempDir(), "sub", "journal.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

func TestCreate(t *testing.T) {
	j := openTemp(t)
	if !intent.IsULID(j.Owner()) {
		t.Fatalf("owner %q is not a lower-case ULID", j.Owner())
	}
	in, created, err := j.Create(t.Context(), intent.Declaration{
		Labels: map[string]string{"team": "a"}, OnDrain: intent.DrainStop, Provider: "daytona", Account: "acct",
	})
	if err != nil || !created {
		t.Fatalf("Create: %v %v", created, err)
	}
	if !intent.IsULID(in.ID) || in.Name != "tether-"+in.ID || in.State != intent.Pending || in.OnDrain != intent.DrainStop {
		t.Fatalf("bad intent %+v", in)
	}
	want := map[string]string{"team": "a", intent.LabelOwner: j.Owner(), intent.LabelIntent: in.ID}
	if !reflect.DeepEqual(in.Labels, want) {
		t.Fatalf("labels %v, want %v", in.Labels, want)
	}
	if in.Provider != "daytona" || in.Account != "acct" || in.CreatedAt.IsZero() {
		t.Fatalf("bad intent %+v", in)
	}
	got, err := j.Get(in.ID)
	if err != nil || !reflect.DeepEqual(got, in) {
		t.Fatalf("Get = %+v, %v; want %+v", got, err, in)
	}
	d, _, err := j.Create(t.Context(), intent.Declaration{})
	if err != nil || d.OnDrain != intent.DrainDelete {
		t.Fatalf("default on_drain: %+v %v", d, err)
	}
	if _, err := j.Get("01arz3ndektsv4rrffq69g5fav"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get unknown: %v", err)
	}
	if _, err := j.Get("../etc"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get malformed: %v", err)
	}
}

func TestCreateRefusesInvalid(t *testing.T) {
	j := openTemp(t)
	many := map[string]string{}
	for i := 0; i <= intent.MaxLabels; i++ {
		many[fmt.Sprint("k", i)] = "v"
	}
	for name, n := range map[string]intent.Declaration{
		"reserved label": {Labels: map[string]string{"tether-owner": "x"}},
		"empty key":      {Labels: map[string]string{"": "x"}},
		"long key":       {Labels: map[string]string{strings.Repeat("k", intent.MaxLabelKey+1): "x"}},
		"long value":     {Labels: map[string]string{"k": strings.Repeat("v", intent.MaxLabelValue+1)}},
		"control value":  {Labels: map[string]string{"k": "a\nb"}},
		"bad key chars":  {Labels: map[string]string{"a b": "x"}},
		"too many":       {Labels: many},
		"on_drain":       {OnDrain: "explode"},
		"idem key":       {Key: "has space"},
		"client id":      {ID: "NOTAULID"},
	} {
		if _, _, err := j.Create(t.Context(), n); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err %v, want ErrInvalid", name, err)
		}
	}
	all, _ := j.All()
	if len(all) != 0 {
		t.Fatalf("invalid intents reached the journal: %v", all)
	}
}

func TestCreateIdempotentKey(t *testing.T) {
	j := openTemp(t)
	// Concurrent retries with one key land in the same or in different
	// batches; either way exactly one intent exists.
	var wg sync.WaitGroup
	ids := make([]string, 50)
	createdN := make([]bool, 50)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in, created, err := j.Create(t.Context(), intent.Declaration{Key: "run-1"})
			if err != nil {
				t.Error(err)
			}
			ids[i], createdN[i] = in.ID, created
		}()
	}
	wg.Wait()
	n := 0
	for i := range ids {
		if ids[i] != ids[0] {
			t.Fatalf("key gave two intents: %s %s", ids[0], ids[i])
		}
		if createdN[i] {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("created=true %d times, want 1", n)
	}
	in, err := j.GetByKey("run-1")
	if err != nil || in.ID != ids[0] || in.Key != "run-1" {
		t.Fatalf("GetByKey: %+v %v", in, err)
	}
	if _, err := j.GetByKey("nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetByKey unknown: %v", err)
	}
}

func TestCreateClientChosenID(t *testing.T) {
	j := openTemp(t)
	id := newID()
	in, created, err := j.Create(t.Context(), intent.Declaration{ID: id, Key: "c1"})
	if err != nil || !created || in.ID != id || in.Name != "tether-"+id {
		t.Fatalf("%+v %v %v", in, created, err)
	}
	if _, _, err := j.Create(t.Context(), intent.Declaration{ID: id, Key: "c2"}); !errors.Is(err, ErrIDTaken) {
		t.Fatalf("reused id: %v", err)
	}
	if again, created, err := j.Create(t.Context(), intent.Declaration{ID: id, Key: "c1"}); err != nil || created || again.ID != id {
		t.Fatalf("retry: %+v %v %v", again, created, err)
	}
}

func TestCreateConcurrentKeepsCreationOrder(t *testing.T) {
	j := openTemp(t)
	const n = 300
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[string]bool{}
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in, _, err := j.Create(t.Context(), intent.Declaration{Labels: map[string]string{"i": fmt.Sprint(i)}})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			seen[in.ID] = true
			mu.Unlock()
		}()
	}
	wg.Wait()
	live, err := j.Live()
	if err != nil || len(live) != n || len(seen) != n {
		t.Fatalf("live %d, seen %d, err %v", len(live), len(seen), err)
	}
	for i := 1; i < len(live); i++ {
		if live[i-1].ID >= live[i].ID || live[i].CreatedAt.Before(live[i-1].CreatedAt) {
			t.Fatalf("not in creation order at %d", i)
		}
	}
	if c, _ := j.LiveCount(); c != n {
		t.Fatalf("LiveCount %d", c)
	}
}

func TestObserve(t *testing.T) {
	j := openTemp(t)
	in, _, _ := j.Create(t.Context(), intent.Declaration{})
	got, rec, err := j.ObserveRecorded(in.ID, "sb1")
	if err != nil || !rec || got.State != intent.Observed || got.SandboxID != "sb1" {
		t.Fatalf("first observe: %+v %v %v", got, rec, err)
	}
	again, rec, err := j.ObserveRecorded(in.ID, "sb1")
	if err != nil || rec || !reflect.DeepEqual(again, got) {
		t.Fatalf("repeat observe must be a no-op: %+v %v %v", again, rec, err)
	}
	if _, err := j.Observe(in.ID, "sb2"); !errors.Is(err, ErrObservedOther) {
		t.Fatalf("other id: %v", err)
	}
	if _, err := j.Observe(in.ID, "bad id"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad sandbox id: %v", err)
	}

	// While releasing, the id is recorded and the state kept.
	r, _, _ := j.Create(t.Context(), intent.Declaration{})
	if _, err := j.Transition(r.ID, intent.Releasing, ""); err != nil {
		t.Fatal(err)
	}
	got, err = j.Observe(r.ID, "sb3")
	if err != nil || got.State != intent.Releasing || got.SandboxID != "sb3" {
		t.Fatalf("observe while releasing: %+v %v", got, err)
	}

	// A terminal intent takes no new id.
	g, _, _ := j.Create(t.Context(), intent.Declaration{})
	if _, err := j.Release(g.ID, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Observe(g.ID, "sb4"); !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("observe released: %v", err)
	}
	if _, err := j.Observe("01arz3ndektsv4rrffq69g5fav", "sb"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("observe unknown: %v", err)
	}
}

func TestReleaseAndNote(t *testing.T) {
	j := openTemp(t)
	in, _, _ := j.Create(t.Context(), intent.Declaration{})
	n, err := j.Note(in.ID, "429")
	if err != nil || n.Attempts != 1 || n.LastError != "429" || n.State != intent.Pending {
		t.Fatalf("Note: %+v %v", n, err)
	}
	r, err := j.Release(in.ID, intent.OutcomeKept)
	if err != nil || r.State != intent.Released || r.Outcome != intent.OutcomeKept || r.Live() {
		t.Fatalf("Release: %+v %v", r, err)
	}
	if again, err := j.Release(in.ID, intent.OutcomeDeleted); err != nil || again.Outcome != intent.OutcomeKept {
		t.Fatalf("second release must change nothing: %+v %v", again, err)
	}
	if _, err := j.Release(in.ID, "maybe"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad outcome: %v", err)
	}
	gone := reach(t, j, intent.Gone)
	if _, err := j.Release(gone.ID, ""); !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("release gone: %v", err)
	}
	live, _ := j.Live()
	if len(live) != 0 {
		t.Fatalf("live: %v", live)
	}
}

func TestReopenKeepsEverything(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	owner := j.Owner()
	a, _, _ := j.Create(t.Context(), intent.Declaration{Key: "k", Labels: map[string]string{"x": "y"}})
	b, _, _ := j.Create(t.Context(), intent.Declaration{})
	if _, err := j.Observe(b.ID, "sb"); err != nil {
		t.Fatal(err)
	}
	c, _, _ := j.Create(t.Context(), intent.Declaration{})
	if _, err := j.Release(c.ID, ""); err != nil {
		t.Fatal(err)
	}
	before, _ := j.All()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := j.Create(t.Context(), intent.Declaration{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("create after close: %v", err)
	}
	if _, err := j.Get(a.ID); !errors.Is(err, ErrClosed) {
		t.Fatalf("get after close: %v", err)
	}

	j2, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j2.Close()
	if j2.Owner() != owner {
		t.Fatalf("owner changed: %s → %s", owner, j2.Owner())
	}
	after, _ := j2.All()
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("reopen changed intents:\n%+v\n%+v", before, after)
	}
	if k, err := j2.GetByKey("k"); err != nil || k.ID != a.ID {
		t.Fatalf("key index lost: %+v %v", k, err)
	}
	live, _ := j2.Live()
	if len(live) != 2 || live[0].ID != a.ID || live[1].ID != b.ID {
		t.Fatalf("live after reopen: %+v", live)
	}
}

func TestLockedByAnotherProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envHoldJournal+"="+path)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		t.Fatalf("helper: %q", line)
	}
	_, err := Open(path, Options{LockTimeout: 100 * time.Millisecond})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("got %v, want ErrLocked", err)
	}
	if !strings.Contains(err.Error(), path) {
		t.Fatalf("message does not name the path: %v", err)
	}
	// Once the holder is gone the journal opens.
	stdin.Close()
	cmd.Wait()
	j, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	j.Close()
}

func TestCorruptFileLeftInPlace(t *testing.T) {
	garbage := make([]byte, 64<<10)
	rand.Read(garbage)
	otherBolt := filepath.Join(t.TempDir(), "other.db")
	db, err := bolt.Open(otherBolt, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("photos")); return err })
	db.Close()
	otherBytes, _ := os.ReadFile(otherBolt)

	for name, content := range map[string][]byte{
		"garbage":          garbage,
		"short":            []byte("not a database"),
		"another bolt app": otherBytes,
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal.db")
			os.WriteFile(path, content, 0o600)
			_, err := Open(path, Options{})
			if err == nil {
				t.Fatal("opened a file that is not a tether journal")
			}
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("message does not name the path: %v", err)
			}
			after, _ := os.ReadFile(path)
			if !bytes.Equal(after, content) {
				t.Fatal("the file was changed")
			}
		})
	}
}

// Create answers with the intent exactly as journaled, on the first create
// and on a replay by key alike.
func TestCreateReturnsTheJournaledIntent(t *testing.T) {
	j := openTemp(t)
	for _, want := range []bool{true, false} {
		in, created, err := j.Create(t.Context(), intent.Declaration{Key: "k", Labels: map[string]string{"a": "b"}})
		if err != nil || created != want {
			t.Fatalf("created=%v (want %v): %v", created, want, err)
		}
		got, err := j.Get(in.ID)
		if err != nil || !reflect.DeepEqual(got, in) {
			t.Fatalf("journaled %+v, returned %+v (%v)", got, in, err)
		}
	}
}

// A key names one live intent: once its intent has ended, the same key
// declares a new intent with a new name (a restarted runner reusing its
// keys must not get a finished intent, whose name Daytona may hand out again).
func TestCreateKeyOfFinishedIntentDeclaresANewOne(t *testing.T) {
	j := openTemp(t)
	for _, end := range []func(id string) error{
		func(id string) error { _, err := j.Release(id, ""); return err },
		func(id string) error {
			if _, err := j.Transition(id, intent.Releasing, ""); err != nil {
				return err
			}
			_, err := j.Transition(id, intent.Gone, "")
			return err
		},
	} {
		key := "restart-" + newID()
		first, _, err := j.Create(t.Context(), intent.Declaration{Key: key})
		if err != nil {
			t.Fatal(err)
		}
		if err := end(first.ID); err != nil {
			t.Fatal(err)
		}
		second, created, err := j.Create(t.Context(), intent.Declaration{Key: key})
		if err != nil || !created || second.ID == first.ID || second.Name == first.Name || !second.Live() {
			t.Fatalf("after the end of %s: %+v created=%v %v", first.ID, second, created, err)
		}
		if byKey, _ := j.GetByKey(key); byKey.ID != second.ID {
			t.Fatalf("the key still names %s", byKey.ID)
		}
		if old, _ := j.Get(first.ID); old.Live() {
			t.Fatalf("the old intent came back: %+v", old)
		}
	}
}

// A client-chosen id (a spool file) is the sandbox's name: once its intent
// has ended it is refused, naming the state, never handed out again.
func TestCreateChosenIDOfFinishedIntentRefused(t *testing.T) {
	j := openTemp(t)
	if _, _, err := j.Create(t.Context(), intent.Declaration{ID: "run-7"}); err != nil {
		t.Fatal(err)
	}
	if again, created, err := j.Create(t.Context(), intent.Declaration{ID: "run-7"}); err != nil || created || again.ID != "run-7" {
		t.Fatalf("retry while live: %+v %v %v", again, created, err)
	}
	if _, err := j.Release("run-7", ""); err != nil {
		t.Fatal(err)
	}
	_, _, err := j.Create(t.Context(), intent.Declaration{ID: "run-7"})
	if !errors.Is(err, ErrIDTaken) || !strings.Contains(err.Error(), "released") {
		t.Fatalf("reuse of a finished id: %v", err)
	}
}

// A change that fails inside a shared transaction leaves nothing behind,
// even what it wrote before failing, and its neighbours in the batch still
// commit (bbolt's Batch discipline, enforced rather than promised).
func TestBatchRollsBackAFailedChange(t *testing.T) {
	j := openTemp(t)
	var changes []*Change
	for i, id := range []string{"a", "b", "half", "c"} {
		c, err := j.PrepareCreate(intent.Declaration{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		if i == 2 {
			create := c.run
			c.run = func(tx *bolt.Tx) error {
				if err := create(tx); err != nil {
					return err
				}
				return errors.New("failed after writing")
			}
		}
		if err := j.Submit(c); err != nil {
			t.Fatal(err)
		}
		changes = append(changes, c)
	}
	for i, c := range changes {
		_, err := c.Wait(t.Context())
		if (i == 2) != (err != nil) {
			t.Fatalf("change %d: %v", i, err)
		}
	}
	if _, err := j.Get("half"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the failed change's write survived: %v", err)
	}
	if n, _ := j.LiveCount(); n != 3 {
		t.Fatalf("%d live intents, want a, b, c", n)
	}
}

// TestOpenRefusesALink: a link at the journal's path is refused, naming
// it, and never followed: its target is not created.
func TestOpenRefusesALink(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "journal.db")
	target := filepath.Join(dir, "elsewhere.db")
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	_, err := Open(path, Options{})
	if !errors.Is(err, access.ErrRefused) || !strings.Contains(err.Error(), path+": it is a symbolic link") || strings.Contains(err.Error(), "cannot create") {
		t.Fatalf("Open of a link: %v", err)
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the link's target was created: %v", err)
	}
}

// TestOpenAdviceFitsTheCase: a journal that could not be created is not
// described as a file "left as it is" to be moved aside.
func TestOpenAdviceFitsTheCase(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs a directory no one may create files in, even root: /proc")
	}
	_, err := Open("/proc/journal.db", Options{})
	if err == nil || !strings.Contains(err.Error(), "cannot create") || strings.Contains(err.Error(), "move it aside") || strings.Contains(err.Error(), "left as it is") {
		t.Fatalf("Open of a journal that cannot be created: %v", err)
	}
}

// A journal path that is not a regular file is refused, and the message
// says what it is instead.
func TestOpenRefusesWhatIsNotAFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, err := Open(dir, Options{})
	if err == nil || !strings.Contains(err.Error(), "not a regular file (a directory)") {
		t.Fatalf("open of a directory: %v", err)
	}
}
