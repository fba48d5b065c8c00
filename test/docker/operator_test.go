//go:build docker

package docker_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/journal/access"
)

// leftLive runs a holder that creates n sandboxes in a container with
// dockerOpts, then docker kills it: the journal on its volume keeps n live
// intents, and every sandbox is still alive by the simulator's record.
func leftLive(t *testing.T, w *world, dockerOpts []string, n int, label string) []string {
	t.Helper()
	c := run(t, image, runOpts{docker: dockerOpts, env: w.env(), args: w.holder(n, label)})
	ids := created(c.ready())
	if len(ids) != n {
		t.Fatalf("the runner created %d sandboxes, want %d", len(ids), n)
	}
	mustDocker(t, "kill", "-s", "KILL", c.name)
	if code := c.wait(); code != exitKILL {
		t.Fatalf("exit %d after docker kill, want %d", code, exitKILL)
	}
	w.assertLeft(label, ids)
	if t.Failed() {
		t.FailNow()
	}
	return ids
}

// oneShot runs `docker run [opts] IMAGE args...` to its end: its exit code,
// stdout and stderr.
func oneShot(t *testing.T, opts, env, args []string) (int, string, string) {
	t.Helper()
	argv := []string{"run", "--rm", "--network", "host", "--label", "tether-test=" + testID}
	argv = append(argv, opts...)
	for _, e := range env {
		argv = append(argv, "-e", e)
	}
	argv = append(append(argv, image), args...)
	cmd := exec.Command("docker", argv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	code := 0
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("docker %s: %v", strings.Join(argv, " "), err)
	}
	return code, stdout.String(), stderr.String()
}

// TestDockerOperatorCommands: the image's ENTRYPOINT is `tether run --`, so
// `docker run IMAGE tether status` hands `tether status` to tether run.
// That is tether's own operator command, not a runner: run in run's place,
// it prints the live intents of the journal on the volume and leaves every
// sandbox alive (by the simulator's record), where a supervising run would
// have replayed and drained them; `docker run IMAGE tether drain` is
// exactly tether drain, which deletes them all.
func TestDockerOperatorCommands(t *testing.T) {
	const sandboxes = 3
	w := newWorld(t)
	vol := []string{"-v", newVolume(t) + ":/var/lib/tether"}
	ids := leftLive(t, w, vol, sandboxes, "operator")

	code, stdout, stderr := oneShot(t, vol, w.env(), []string{"tether", "status"})
	if code != 0 {
		t.Fatalf("docker run IMAGE tether status: exit %d\n%s%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, fmt.Sprintf("%d live (%d observed)", sandboxes, sandboxes)) {
		t.Errorf("tether status does not show the %d live intents:\n%s", sandboxes, stdout)
	}
	for _, id := range ids {
		if !strings.Contains(stdout, id) {
			t.Errorf("tether status does not list sandbox %s:\n%s", id, stdout)
		}
	}
	if strings.Contains(stderr, "replay") || strings.Contains(stderr, "drain") {
		t.Errorf("docker run IMAGE tether status replayed or drained:\n%s", stderr)
	}
	w.assertLeft("operator", ids)

	code, stdout, stderr = oneShot(t, vol, w.env(), []string{"tether", "drain"})
	if code != 0 {
		t.Fatalf("docker run IMAGE tether drain: exit %d, want 0\n%s%s", code, stdout, stderr)
	}
	if total, _, left := drainReport(t, stderr); total != sandboxes || left != 0 || !strings.Contains(stderr, fmt.Sprintf("tether:   gone           %d\n", sandboxes)) {
		t.Errorf("tether drain's report: %d intents, %d left; want %d gone:\n%s", total, left, sandboxes, stderr)
	}
	w.assertGone("operator", ids)
}

// TestDockerJournalOfAnotherUID: a container run with --user 1000 journals
// under uid-1000 on its volume (here a host directory). Killed with live
// intents, its journal is read by root on the host (`tether status
// --journal DIR/uid-1000/journal.db`), though root does not own it, with
// nothing written; root's `tether drain` is refused, saying how to act as
// uid 1000 (never a chown, which would lock the container out); and the
// next `docker run --user 1000` on that volume still starts and replays
// the journal, deleting every sandbox.
func TestDockerJournalOfAnotherUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root on the host: root reading uid 1000's journal is the case")
	}
	const sandboxes = 3
	w := newWorld(t)
	dir := journalDir(t)
	opts := []string{"--user", "1000", "-v", dir + ":/var/lib/tether"}
	ids := leftLive(t, w, opts, sandboxes, "uid1000")
	path := filepath.Join(dir, "uid-1000", "journal.db")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("the uid 1000 container's journal: %v", err)
	}
	if owner := access.FileOwner(fi); owner != 1000 {
		t.Fatalf("%s is owned by uid %d, want 1000", path, owner)
	}
	before := listing(t, filepath.Dir(path))

	tether := testutil.Tether(t)
	host := func(args ...string) (int, string) {
		cmd := exec.Command(tether, args...)
		cmd.Env = append(os.Environ(), w.env()...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), string(out)
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	code, out := host("status", "--journal", path)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("%d live (%d observed)", sandboxes, sandboxes)) {
		t.Errorf("root's tether status of uid 1000's journal: exit %d\n%s", code, out)
	}
	code, out = host("drain", "--journal", path)
	if code != 125 || !strings.Contains(out, "docker run --user 1000") || !strings.Contains(out, "setpriv --reuid=1000") || strings.Contains(out, "chown 0") {
		t.Errorf("root's tether drain of uid 1000's journal: exit %d, want 125 saying how to act as uid 1000\n%s", code, out)
	}
	if after := listing(t, filepath.Dir(path)); after != before {
		t.Errorf("root's commands changed uid 1000's journal directory:\nbefore %s\nafter  %s", before, after)
	}
	w.assertLeft("uid1000", ids)

	next := run(t, image, runOpts{docker: opts, env: w.env(), args: []string{"runner", "--sandboxes", "0", "--wait-idle", "--label", "uid1000-next"}})
	if code := next.wait(); code != 0 {
		t.Fatalf("the next --user 1000 container exited %d, want 0; stderr:\n%s", code, next.stderr)
	}
	w.assertGone("uid1000", ids)
}

// listing is each file of dir with its owner, mode and size.
func listing(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s uid %d %s %d; ", e.Name(), access.FileOwner(fi), fi.Mode(), fi.Size())
	}
	return b.String()
}
