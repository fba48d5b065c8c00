package e2e_test

// The journal follows the access rule of the socket and the spool
// directory: in a directory every user may write (/tmp, the image's
// /var/lib/tether), another uid must not be able to hand root's tether a
// journal, a marker or a temporary file of its own making. Each planted
// file is refused with exit 125 naming it and the fix, the child never
// runs, and nothing outside the journal's directory changes.

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/journal/access"
)

// planter is uid 1000, as in the issue: another local user.
const planter = 1000

// asPlanter runs argv as uid 1000 and fails the test if it fails.
func asPlanter(t *testing.T, argv ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to act as another uid (setpriv); run the suite as root, as .ci/run does")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv not installed (util-linux; .ci/run installs it)")
	}
	cmd := exec.Command(setpriv, append([]string{"--reuid=1000", "--regid=1000", "--clear-groups"}, argv...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("as uid %d: %v: %v\n%s", planter, argv, err, out)
	}
}

func TestJournalPlantedByAnotherUser(t *testing.T) {
	for _, tc := range []struct {
		name string
		// plant runs as uid 1000 in the shared directory shared; it
		// returns the journal path root's tether is given and the path
		// the refusal must name.
		plant func(t *testing.T, shared string) (journalPath, named string)
		why   string
	}{
		{"journal pre-created 0666", func(t *testing.T, shared string) (string, string) {
			j := filepath.Join(shared, "journal.db")
			asPlanter(t, "/bin/sh", "-c", "umask 0; : > "+j)
			return j, j
		}, "owned by uid 1000"},
		{"symlink at the marker's tmp", func(t *testing.T, shared string) (string, string) {
			j := filepath.Join(shared, "journal.db")
			asPlanter(t, "ln", "-s", filepath.Join(filepath.Dir(shared), "victim"), j+journal.MarkerSuffix+".tmp")
			return j, j + journal.MarkerSuffix + ".tmp"
		}, "it is a symbolic link"},
		{"symlink at the journal", func(t *testing.T, shared string) (string, string) {
			j := filepath.Join(shared, "journal.db")
			asPlanter(t, "ln", "-s", filepath.Join(filepath.Dir(shared), "victim"), j)
			return j, j
		}, "it is a symbolic link"},
		{"marker pre-created", func(t *testing.T, shared string) (string, string) {
			j := filepath.Join(shared, "journal.db")
			asPlanter(t, "/bin/sh", "-c", "umask 077; echo 01jd5v2k9m0s8f4r7q3x6y1z2a > "+j+journal.MarkerSuffix)
			return j, j + journal.MarkerSuffix
		}, "owned by uid 1000"},
		{"per-uid directory pre-created", func(t *testing.T, shared string) (string, string) {
			d := filepath.Join(shared, "uid-0")
			asPlanter(t, "mkdir", "-m", "0777", d)
			return filepath.Join(d, "journal.db"), d
		}, "owned by uid 1000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.nobodyCan()
			shared := filepath.Join(w.dir, "shared")
			if err := os.Mkdir(shared, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(shared, 0o777|os.ModeSticky); err != nil {
				t.Fatal(err)
			}
			// A root-owned file a followed link would overwrite.
			victim := filepath.Join(w.dir, "victim")
			if err := os.WriteFile(victim, []byte("root's own\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			journalPath, named := tc.plant(t, shared)
			before := snapshot(t, w.dir, shared)
			sharedBefore := snapshot(t, shared, "")

			w.journal = journalPath
			code, stderr, ran := w.childRan()
			if code != 125 || ran {
				t.Fatalf("exit %d (want 125), child ran %v; stderr:\n%s", code, ran, stderr)
			}
			for _, want := range []string{"journal " + named + ": ", tc.why, "tether will not use it", "remove it"} {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr does not say %q:\n%s", want, stderr)
				}
			}
			if after := snapshot(t, w.dir, shared); !maps.Equal(before, after) {
				t.Errorf("outside the journal's directory:\nbefore %v\nafter  %v", before, after)
			}
			if after := snapshot(t, shared, ""); !maps.Equal(sharedBefore, after) {
				t.Errorf("in the journal's directory:\nbefore %v\nafter  %v", sharedBefore, after)
			}
		})
	}
}

// TestJournalInASharedDirectory: in a sticky, world-writable directory a
// journal tether creates itself is used, with every file tether writes
// beside it private to root.
func TestJournalInASharedDirectory(t *testing.T) {
	w := newWorld(t)
	shared := filepath.Join(w.dir, "shared")
	if err := os.Mkdir(shared, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	w.journal = filepath.Join(shared, "journal.db")
	for range 2 { // created, then reopened
		if code, stderr, ran := w.childRan(); code != 0 || !ran {
			t.Fatalf("exit %d, child ran %v; stderr:\n%s", code, ran, stderr)
		}
	}
	for _, p := range []string{w.journal, w.journal + journal.MarkerSuffix} {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := access.CheckFile(p, fi); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %s: %v", p, fi.Mode(), err)
		}
	}
}

// snapshot is every path under dir (skipping skip) with its mode, owner,
// link target and content.
func snapshot(t *testing.T, dir, skip string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if p == skip {
			return filepath.SkipDir
		}
		v := fi.Mode().String() + " " + "uid " + strconv.Itoa(access.FileOwner(fi))
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			v += " -> " + target
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			v += " " + string(b)
		}
		out[p] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestJournalOfAnotherUID: a journal uid 1000's tether keeps (a container
// run with --user 1000 journals under uid-1000 on its volume) is read by
// root's `tether status` where it lies, though root's tether does not own
// it; root's `tether drain`, which would write beside it, is refused with
// how to act as uid 1000, never a chown that would lock uid 1000 out.
// Nothing of the owner's changes, and uid 1000's tether still uses it.
func TestJournalOfAnotherUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to act as another uid (setpriv); run the suite as root, as .ci/run does")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv not installed (util-linux; .ci/run installs it)")
	}
	w := newWorld(t)
	w.nobodyCan()
	shared := filepath.Join(w.dir, "shared")
	if err := os.Mkdir(shared, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(shared, "uid-1000")
	path := filepath.Join(dir, "journal.db")
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"job-1", "job-2"} {
		if _, _, err := j.Create(t.Context(), intent.Declaration{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("chown", "-R", "1000:1000", dir).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v\n%s", err, out)
	}
	before := snapshot(t, dir, "")

	status := func(as ...string) (int, string, string) {
		t.Helper()
		argv := append(as, bin.tether, "status", "--journal", path)
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = w.env
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, stdout.String(), stderr.String()
	}
	code, stdout, stderr := status()
	if code != 0 || !strings.Contains(stdout, "2 live (2 pending)") || !strings.Contains(stdout, "tether-job-1") {
		t.Errorf("root's tether status of uid 1000's journal: exit %d\n%s%s", code, stdout, stderr)
	}

	code, stderr = w.runTether("drain", "--journal", path)
	if code != 125 {
		t.Errorf("root's tether drain of uid 1000's journal: exit %d, want 125; stderr:\n%s", code, stderr)
	}
	for _, want := range []string{"owned by uid 1000", "setpriv --reuid=1000 --regid=1000 --clear-groups tether", "docker run --user 1000", "do not chown it"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "chown 0") {
		t.Errorf("the refusal suggests taking the journal from its owner:\n%s", stderr)
	}
	if after := snapshot(t, dir, ""); !maps.Equal(before, after) {
		t.Errorf("uid 1000's journal changed:\nbefore %v\nafter  %v", before, after)
	}
	if code, stdout, stderr := status(setpriv, "--reuid=1000", "--regid=1000", "--clear-groups"); code != 0 || !strings.Contains(stdout, "2 live") {
		t.Errorf("uid 1000's tether status of its own journal after: exit %d\n%s%s", code, stdout, stderr)
	}
}
