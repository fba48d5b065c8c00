package spooldir

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tether-run/tether/internal/intake"
	"github.com/tether-run/tether/internal/testutil"
)

// The spool directory under attack: whoever may write into it must not make
// tether write anywhere else, lose a reason, or journal what the socket
// would refuse. Each test also shows the intake keeps serving: a marker
// file written after the hostile one is journaled.

// served writes a valid intent file named zz-marker and waits for it to be
// journaled and for the spool to be empty: every file before it has been
// taken or rejected (its reason written before it left the spool).
func served(t *testing.T, f *intakeFixture, id string) {
	t.Helper()
	spoolWrite(t, f.dir, "zz-"+id, `{"op":"intent","id":"`+id+`"}`)
	testutil.WaitFor(t, "the marker "+id, func() bool { _, err := f.j.Get(id); return err == nil })
	testutil.WaitFor(t, "spool to empty", func() bool { return spoolEmpty(f.dir) })
}

func rejectedReason(t *testing.T, dir, slot string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, RejectedDir, slot+".err"))
	if err != nil {
		t.Fatalf("%s.err: %v", slot, err)
	}
	return string(b)
}

// TestRejectNeverWritesThroughSymlinks: rejected/NAME.err and NAME.json
// planted as symbolic links to files elsewhere stay links; the files they
// point at are unchanged; the reason goes under the next free name.
func TestRejectNeverWritesThroughSymlinks(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	victimJSON := filepath.Join(outside, "victim.json")
	os.WriteFile(victim, []byte("precious\n"), 0o600)
	os.WriteFile(victimJSON, []byte("precious too\n"), 0o600)
	f := startIntake(t, &Reader{}, func(dir string) {
		os.Mkdir(filepath.Join(dir, RejectedDir), 0o700)
		os.Symlink(victim, filepath.Join(dir, RejectedDir, "x.err"))
		os.Symlink(victimJSON, filepath.Join(dir, RejectedDir, "x.json"))
		spoolWrite(t, dir, "x", `{"op":"intent","id":"BAD"}`)
	})
	served(t, f, "after-symlinks")
	for path, want := range map[string]string{victim: "precious\n", victimJSON: "precious too\n"} {
		if b, err := os.ReadFile(path); err != nil || string(b) != want {
			t.Fatalf("%s written through a symlink: %q %v", path, b, err)
		}
	}
	for _, name := range []string{"x.err", "x.json"} {
		if fi, err := os.Lstat(filepath.Join(f.dir, RejectedDir, name)); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Fatalf("planted link %s replaced: %v %v", name, fi, err)
		}
	}
	if r := rejectedReason(t, f.dir, "x.1"); !strings.Contains(r, "[a-z0-9_-]") {
		t.Fatalf("x.1.err: %q", r)
	}
	if b, err := os.ReadFile(filepath.Join(f.dir, RejectedDir, "x.1.json")); err != nil || !strings.Contains(string(b), "BAD") {
		t.Fatalf("x.1.json: %q %v", b, err)
	}
}

// TestRejectedDirSymlinkRefused: rejected/ as a symbolic link (or a file)
// makes the intake refuse to start, naming it; nothing is written where it
// points.
func TestRejectedDirSymlinkRefused(t *testing.T) {
	t.Parallel()
	for name, plant := range map[string]func(dir, target string){
		"symlink": func(dir, target string) { os.Symlink(target, filepath.Join(dir, RejectedDir)) },
		"file":    func(dir, _ string) { os.WriteFile(filepath.Join(dir, RejectedDir), nil, 0o600) },
	} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "spool")
			os.Mkdir(dir, 0o700)
			target := t.TempDir()
			plant(dir, target)
			spoolWrite(t, dir, "x", `{"op":"intent","id":"BAD"}`)
			in := &Reader{Intake: &intake.Intake{Journal: openTemp(t)}, Dir: dir}
			err := in.Open()
			if err == nil || !strings.Contains(err.Error(), "rejected/") || !strings.Contains(err.Error(), "symbolic link") {
				t.Fatalf("Open: %v; want a refusal naming rejected/", err)
			}
			if entries, _ := os.ReadDir(target); len(entries) != 0 {
				t.Fatalf("written into the link's target: %v", entries)
			}
			if _, err := os.Stat(filepath.Join(dir, "x.json")); err != nil {
				t.Fatalf("the spool file was touched: %v", err)
			}
		})
	}
}

// TestRejectKeepsEarlierRejects: a second rejected file of the same name
// gets its own slot; the first and its reason are kept.
func TestRejectKeepsEarlierRejects(t *testing.T) {
	t.Parallel()
	f := startIntake(t, &Reader{}, nil)
	contents := []string{`{"op":"intent","id":"FIRST"}`, `{"op":"intent","id":"SECOND"}`, `{"op":"bogus","id":"third"}`}
	slots := []string{"dup", "dup.1", "dup.2"}
	for i, c := range contents {
		spoolWrite(t, f.dir, "dup", c)
		testutil.WaitFor(t, slots[i]+".json", func() bool {
			_, err := os.Stat(filepath.Join(f.dir, RejectedDir, slots[i]+".json"))
			return err == nil
		})
	}
	for i, slot := range slots {
		b, err := os.ReadFile(filepath.Join(f.dir, RejectedDir, slot+".json"))
		if err != nil || strings.TrimSpace(string(b)) != contents[i] {
			t.Fatalf("%s.json = %q, %v; want %q", slot, b, err, contents[i])
		}
		if r := rejectedReason(t, f.dir, slot); r == "" {
			t.Fatalf("%s.err empty", slot)
		}
	}
	if r := rejectedReason(t, f.dir, "dup.2"); !strings.Contains(r, "bogus") {
		t.Fatalf("dup.2.err = %q; want the third file's reason", r)
	}
}

// TestIrregularSpoolEntries: a FIFO, a directory and a hard link named
// NAME.json are rejected with a reason in words, and the intake goes on.
func TestIrregularSpoolEntries(t *testing.T) {
	t.Parallel()
	outside := filepath.Join(t.TempDir(), "someone-elses.json")
	os.WriteFile(outside, []byte(`{"op":"intent","id":"linked"}`), 0o600)
	f := startIntake(t, &Reader{}, func(dir string) {
		if err := syscall.Mkfifo(filepath.Join(dir, "fifo.json"), 0o600); err != nil {
			t.Fatal(err)
		}
		os.Mkdir(filepath.Join(dir, "dir.json"), 0o700)
		os.WriteFile(filepath.Join(dir, "dir.json", "inside"), []byte("x"), 0o600)
		if err := os.Link(outside, filepath.Join(dir, "hard.json")); err != nil {
			t.Fatal(err)
		}
	})
	served(t, f, "after-irregular")
	for slot, says := range map[string]string{"fifo": "named pipe", "dir": "a directory", "hard": "hard links"} {
		if r := rejectedReason(t, f.dir, slot); !strings.Contains(r, says) {
			t.Errorf("%s.err = %q; want it to say %q", slot, r, says)
		}
		if _, err := os.Lstat(filepath.Join(f.dir, slot+".json")); err == nil {
			t.Errorf("%s.json still in the spool", slot)
		}
	}
	if _, err := f.j.Get("linked"); err == nil {
		t.Fatal("a hard-linked file was journaled")
	}
	if b, err := os.ReadFile(outside); err != nil || !strings.Contains(string(b), "linked") {
		t.Fatalf("the hard link's other name changed: %q %v", b, err)
	}
}

// TestSpoolDirectoryFollowsTheSocketsRules: a directory others may write is
// refused unless sticky; one owned by a uid that may not use tether is
// refused unless that uid is allowed.
func TestSpoolDirectoryFollowsTheSocketsRules(t *testing.T) {
	t.Parallel()
	open := func(t *testing.T, mode os.FileMode, owner int, allow []int) error {
		dir := filepath.Join(t.TempDir(), "spool")
		os.Mkdir(dir, 0o700)
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		if owner >= 0 {
			if err := os.Chown(dir, owner, -1); err != nil {
				t.Fatal(err)
			}
		}
		in := &Reader{Intake: &intake.Intake{Journal: openTemp(t)}, Dir: dir, AllowUIDs: allow}
		defer in.close()
		return in.Open()
	}
	if err := open(t, 0o777, -1, nil); err == nil || !strings.Contains(err.Error(), "lets others write") {
		t.Errorf("world-writable: %v", err)
	}
	if err := open(t, 0o770, -1, nil); err == nil || !strings.Contains(err.Error(), "lets others write") {
		t.Errorf("group-writable: %v", err)
	}
	if err := open(t, 0o1777|os.ModeSticky, -1, nil); err != nil {
		t.Errorf("sticky world-writable: %v", err)
	}
	if err := open(t, 0o700, -1, nil); err != nil {
		t.Errorf("0700: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("the ownership cases need root (chown); run the suite as root, as .ci/run does")
	}
	if err := open(t, 0o700, 65534, nil); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Errorf("owned by nobody: %v", err)
	}
	if err := open(t, 0o700, 65534, []int{65534}); err != nil {
		t.Errorf("owned by an allowed uid: %v", err)
	}
}

// TestFilesOfOtherUsersRefused: a spool file owned by a uid the socket
// would refuse is rejected, naming the uid; the same file from an allowed
// uid is journaled.
func TestFilesOfOtherUsersRefused(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to own files as another uid (chown); run the suite as root, as .ci/run does")
	}
	const nobody = 65534
	write := func(dir, name, content string, uid int) {
		tmp := filepath.Join(dir, "."+name+".tmp")
		os.WriteFile(tmp, []byte(content), 0o600)
		if err := os.Chown(tmp, uid, uid); err != nil {
			t.Fatal(err)
		}
		os.Rename(tmp, filepath.Join(dir, name+".json"))
	}
	f := startIntake(t, &Reader{}, func(dir string) {
		write(dir, "from-nobody", `{"op":"intent","id":"nobodys"}`, nobody)
	})
	served(t, f, "after-nobody")
	if r := rejectedReason(t, f.dir, "from-nobody"); !strings.Contains(r, "uid 65534") || !strings.Contains(r, "may not use tether") {
		t.Fatalf("from-nobody.err = %q", r)
	}
	if _, err := f.j.Get("nobodys"); err == nil {
		t.Fatal("a file of a uid that may not use tether was journaled")
	}

	g := startIntake(t, &Reader{AllowUIDs: []int{nobody}}, func(dir string) {
		write(dir, "from-nobody", `{"op":"intent","id":"nobodys"}`, nobody)
	})
	testutil.WaitFor(t, "the allowed uid's intent", func() bool { _, err := g.j.Get("nobodys"); return err == nil })
}
