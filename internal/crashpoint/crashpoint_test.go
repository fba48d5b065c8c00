package crashpoint

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/tether-run/tether/journal"
)

// envChild makes the test binary a child that hits a point three times.
const envChild = "CRASHPOINT_TEST_CHILD"

// TestHit runs this test binary as a child that hits ReaperAfterDelete three
// times: it must die of SIGKILL at exactly the hit named, and not at all
// when the point is another or the binary was built without crash points.
func TestHit(t *testing.T) {
	if os.Getenv(envChild) != "" {
		for i := 1; i <= 3; i++ {
			os.Stdout.WriteString("before " + string(rune('0'+i)) + "\n")
			Hit(ReaperAfterDelete)
		}
		os.Stdout.WriteString("survived\n")
		os.Exit(0)
	}
	for _, tc := range []struct {
		spec     string
		dies     bool
		lastSeen string
	}{
		{ReaperAfterDelete, true, "before 1"},
		{ReaperAfterDelete + ":2", true, "before 2"},
		{ReaperAfterDelete + ":3", true, "before 3"},
		{ReaperAfterDelete + ":4", false, "survived"},
		{ReaperBeforeDelete, false, "survived"},
		{"", false, "survived"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHit$")
		cmd.Env = append(os.Environ(), envChild+"=1", Env+"="+tc.spec)
		out, err := cmd.Output()
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		last := lines[len(lines)-1]
		killed := false
		if ee, ok := err.(*exec.ExitError); ok {
			ws := ee.Sys().(syscall.WaitStatus)
			killed = ws.Signaled() && ws.Signal() == syscall.SIGKILL
		}
		wantDies := tc.dies && Enabled
		want := tc.lastSeen
		if !Enabled {
			want = "survived"
		}
		if killed != wantDies || last != want {
			t.Errorf("%s=%q (enabled %v): killed %v, last line %q; want killed %v, last %q (err %v)", Env, tc.spec, Enabled, killed, last, wantDies, want, err)
		}
	}
}

// The journal's points are named in package spool, which imports nothing
// of internal/: the names must agree.
func TestJournalPointNames(t *testing.T) {
	if CompactBeforeRename != journal.CrashCompactBeforeRename || CompactAfterRename != journal.CrashCompactAfterRename {
		t.Fatalf("crashpoint %q, %q; spool %q, %q", CompactBeforeRename, CompactAfterRename, journal.CrashCompactBeforeRename, journal.CrashCompactAfterRename)
	}
}
