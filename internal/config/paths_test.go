package config

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// envPrintDefaults makes the test binary print Default()'s paths and exit:
// the tests below run it as another user, as `docker run --user 1000` does.
const envPrintDefaults = "TETHER_CONFIG_TEST_PRINT_DEFAULTS"

func TestMain(m *testing.M) {
	if dirs := os.Getenv(envPrintDefaults); dirs != "" {
		state, runtime, _ := strings.Cut(dirs, ":")
		wellKnown = map[string]string{StateDir: state, RuntimeDir: runtime}
		c := Default()
		b, _ := json.Marshal(map[string]string{"journal": c.Journal, "socket": c.Socket, "spool": c.Spool})
		fmt.Println(string(b))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestDefaultPathsAsAnotherUser runs the defaults as uid 1000 with the
// environment Docker gives a uid the image does not know (HOME=/, no
// XDG_*): no path may be under /.cache, which that user cannot create.
func TestDefaultPathsAsAnotherUser(t *testing.T) {
	setpriv, err := exec.LookPath("setpriv")
	if err != nil || os.Geteuid() != 0 {
		t.Skip("needs root and setpriv (util-linux) to run as another user")
	}
	// The test binary and the directories must be reachable by uid 1000.
	// Not t.TempDir: its parent is private to root.
	dir, err := os.MkdirTemp("", "tether-config-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "config.test")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	shared := func(name string) string { // like the image's: world-writable, sticky
		p := filepath.Join(dir, name)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o777|os.ModeSticky); err != nil {
			t.Fatal(err)
		}
		return p
	}
	state, runtime, tmp := shared("state"), shared("run"), shared("tmp")
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	// A journal uid 1000 kept directly in the shared directory: its own to
	// keep, but one root must not adopt.
	legacy := shared("legacy")
	if err := os.WriteFile(filepath.Join(legacy, "journal.db"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(legacy, "journal.db"), 1000, 1000); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, uid, home, dirs string
		want                  map[string]string
	}{
		{"image dirs writable", "1000", "/", state + ":" + runtime, map[string]string{
			"journal": state + "/uid-1000/journal.db", "socket": runtime + "/tether.sock", "spool": runtime + "/spool"}},
		{"no image dirs, HOME=/", "1000", "/", missing + ":" + missing, map[string]string{
			"journal": tmp + "/tether-1000/journal.db", "socket": tmp + "/tether-1000/tether.sock", "spool": tmp + "/tether-1000/spool"}},
		{"no image dirs, a home", "1000", home, missing + ":" + missing, map[string]string{
			"journal": home + "/.cache/tether/journal.db", "socket": home + "/.cache/tether/tether.sock", "spool": home + "/.cache/tether/spool"}},
		{"root, image dirs", "0", "/", state + ":" + runtime, map[string]string{"journal": state + "/uid-0/journal.db"}},
		{"its own journal kept in the shared dir", "1000", "/", legacy + ":" + runtime, map[string]string{"journal": legacy + "/journal.db"}},
		{"root, another user's journal in the shared dir", "0", "/", legacy + ":" + runtime, map[string]string{"journal": legacy + "/uid-0/journal.db"}},
		{"root", "0", "/", missing + ":" + missing, map[string]string{
			"journal": missing + "/journal.db", "socket": missing + "/tether.sock", "spool": missing + "/spool"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(setpriv, "--reuid", tc.uid, "--regid", tc.uid, "--clear-groups", bin)
			cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + tc.home, "TMPDIR=" + tmp, envPrintDefaults + "=" + tc.dirs}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			var got map[string]string
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("%q: %v", out, err)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s: %s, want %s", k, got[k], v)
				}
			}
		})
	}
}
