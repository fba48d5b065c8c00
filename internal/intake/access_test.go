package intake

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAllowed(t *testing.T) {
	for _, c := range []struct {
		uid   int
		allow []int
		want  bool
	}{
		{0, nil, true},
		{os.Geteuid(), nil, true},
		{os.Getuid(), nil, true},
		{65534, nil, os.Geteuid() == 65534},
		{65534, []int{1000, 65534}, true},
		{4242, []int{1000, 65534}, false},
	} {
		if got := Allowed(c.uid, c.allow); got != c.want {
			t.Errorf("Allowed(%d, %v) = %v, want %v", c.uid, c.allow, got, c.want)
		}
	}
}

func TestCheckDir(t *testing.T) {
	base := t.TempDir()
	check := func(name string, mode os.FileMode, owner int, owners []int) error {
		p := filepath.Join(base, name)
		os.Mkdir(p, 0o700)
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if owner >= 0 {
			if err := os.Chown(p, owner, -1); err != nil {
				t.Fatal(err)
			}
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return CheckDir(fi, owners)
	}
	for _, c := range []struct {
		name  string
		mode  os.FileMode
		says  string // "" for accepted
		owner int
		allow []int
	}{
		{"private", 0o700, "", -1, nil},
		{"readable", 0o755, "", -1, nil},
		{"world-writable", 0o777, "lets others write", -1, nil},
		{"group-writable", 0o775, "lets others write", -1, nil},
		{"sticky", 0o777 | os.ModeSticky, "", -1, nil},
		{"nobodys", 0o700, "owned by uid 65534", 65534, nil},
		{"nobodys-allowed", 0o700, "", 65534, []int{65534}},
	} {
		if c.owner >= 0 && os.Geteuid() != 0 {
			t.Logf("%s: skipped, needs root to chown", c.name)
			continue
		}
		err := check(c.name, c.mode, c.owner, c.allow)
		if (c.says == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.says)) {
			t.Errorf("%s: %v; want %q", c.name, err, c.says)
		}
	}
	file := filepath.Join(base, "file")
	os.WriteFile(file, nil, 0o600)
	fi, _ := os.Stat(file)
	if err := CheckDir(fi, nil); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("a file: %v", err)
	}
}
