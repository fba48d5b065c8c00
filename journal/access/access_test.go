package access

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOpenFile(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	open := func(p string) error {
		f, err := OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
		if err == nil {
			f.Close()
		}
		return err
	}
	if err := open(link); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), link+": it is a symbolic link") {
		t.Errorf("a link: %v", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Errorf("the link's target was truncated: %q", b)
	}
	fresh := filepath.Join(dir, "fresh")
	if err := open(fresh); err != nil {
		t.Fatalf("a new file: %v", err)
	}
	if fi, _ := os.Lstat(fresh); fi.Mode().Perm() != 0o600 {
		t.Errorf("new file mode %s", fi.Mode())
	}
	if err := open(target); err != nil { // exists, ours, 0600: used as it is
		t.Fatalf("an existing file of ours: %v", err)
	}
	loose := filepath.Join(dir, "loose")
	os.WriteFile(loose, nil, 0o600)
	os.Chmod(loose, 0o666)
	if err := open(loose); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "lets others write") {
		t.Errorf("a file others may write: %v", err)
	}
	if os.Geteuid() == 0 {
		theirs := filepath.Join(dir, "theirs")
		os.WriteFile(theirs, nil, 0o600)
		os.Chown(theirs, 1000, 1000)
		err := open(theirs)
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "owned by uid 1000") {
			t.Errorf("a file of uid 1000: %v", err)
		}
		// The fix keeps the file its owner's: act as that uid.
		if err == nil || !strings.Contains(err.Error(), "setpriv --reuid=1000 --regid=1000") || !strings.Contains(err.Error(), "docker run --user 1000") || strings.Contains(err.Error(), "chown 0") {
			t.Errorf("the refusal of a file of uid 1000 does not say to act as that uid: %v", err)
		}
	}
	if err := open(dir); err == nil {
		t.Error("a directory opened as a file")
	}
}

func TestCreateTemp(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "x.tmp")
	os.WriteFile(stale, []byte("left by a crash"), 0o600)
	f, err := CreateTemp(stale, 0o600)
	if err != nil {
		t.Fatalf("over a stale temporary file of ours: %v", err)
	}
	f.Close()
	if b, _ := os.ReadFile(stale); len(b) != 0 {
		t.Errorf("not created afresh: %q", b)
	}
	target := filepath.Join(dir, "target")
	os.WriteFile(target, []byte("keep"), 0o600)
	link := filepath.Join(dir, "l.tmp")
	os.Symlink(target, link)
	if _, err := CreateTemp(link, 0o600); !errors.Is(err, ErrRefused) {
		t.Errorf("a link: %v", err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the planted link was removed or replaced: %v", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Errorf("the link's target was written: %q", b)
	}
}

// TestOpenToRead: a reader takes any regular file it may read, whoever owns
// it and whatever its mode, but never follows a link and never takes what
// is not a regular file.
func TestOpenToRead(t *testing.T) {
	dir := t.TempDir()
	loose := filepath.Join(dir, "loose")
	if err := os.WriteFile(loose, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chmod(loose, 0o666)
	if os.Geteuid() == 0 {
		os.Chown(loose, 1000, 1000)
	}
	f, err := OpenToRead(loose)
	if err != nil {
		t.Fatalf("a regular file of another uid, mode 0666: %v", err)
	}
	f.Close()
	link := filepath.Join(dir, "link")
	os.Symlink(loose, link)
	if _, err := OpenToRead(link); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("a link: %v", err)
	}
	if _, err := OpenToRead(dir); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory: %v", err)
	}
}

// The file rule by mode, for a regular file of tether's own user: only the
// owner may write it. A group that may write (0620, 0660) could rewrite
// the journal as surely as everyone could (0602, 0666); reading is no
// threat to what tether keeps.
func TestOpenFileRefusesEveryModeOthersMayWrite(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		mode os.FileMode
		ok   bool
	}{
		{0o600, true}, {0o640, true}, {0o644, true}, {0o400, true},
		{0o620, false}, {0o660, false}, {0o602, false}, {0o666, false}, {0o622, false},
	} {
		p := filepath.Join(dir, tc.mode.String())
		if err := os.WriteFile(p, []byte("keep"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, tc.mode); err != nil { // the umask does not narrow a chmod
			t.Fatal(err)
		}
		f, err := OpenFile(p, os.O_RDONLY, 0)
		if err == nil {
			f.Close()
		}
		switch {
		case tc.ok && err != nil:
			t.Errorf("mode %s: refused: %v", tc.mode, err)
		case !tc.ok && (!errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "its mode "+tc.mode.String()+" lets others write")):
			t.Errorf("mode %s: %v, want refused for its mode", tc.mode, err)
		}
		if err := CheckExisting(p); (err == nil) != tc.ok {
			t.Errorf("mode %s: CheckExisting = %v", tc.mode, err)
		}
	}
}
