//go:build docker

package docker_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tether-run/tether/internal/testutil"

	"github.com/tether-run/tether/internal/config"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// Exit codes the tests expect of the container, i.e. of tether as PID 1.
const (
	exitTERM = 128 + 15 // the runner died of the forwarded SIGTERM; tether ended by itself
	exitKILL = 128 + 9  // docker's SIGKILL reached tether
)

func created(lines []line) []string {
	var ids []string
	for _, l := range lines {
		if len(l.fields) >= 4 && l.fields[0] == "created" {
			ids = append(ids, l.fields[3])
		}
	}
	return ids
}

// TestDockerStop50: `docker stop` (10 s) of a container whose runner holds
// 50 live Daytona sandboxes (stop50). TestDockerStop50E2B is the same for
// E2B.
func TestDockerStop50(t *testing.T) { stop50(t, newWorld(t)) }

// TestDockerKillReplay: `docker kill -s KILL`, then a new container on the
// same volume replays the journal (killReplay), on Daytona.
func TestDockerKillReplay(t *testing.T) { killReplay(t, newWorld(t)) }

// TestDockerStopTooShort: `docker stop -t 2` while Daytona's deletes hang.
// With the default drain timeout (5 s) Docker's SIGKILL cuts the drain
// short; with one fitted to the 2 s (--drain-timeout 500ms) tether reports
// every sandbox it could not finish and exits by itself. Either way each
// intent stays live in the journal, every sandbox carries the auto-stop
// backstop (the runner created them with auto-stop off), and the next boot
// replays them.
func TestDockerStopTooShort(t *testing.T) {
	const sandboxes = 20
	for _, tc := range []struct {
		name     string
		env      []string
		wantCode int
	}{
		{"default drain timeout, killed mid-drain", nil, exitKILL},
		{"drain timeout fitted, reported", []string{config.EnvDrainTimeout + "=500ms"}, exitTERM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			dir := journalDir(t)
			label := "short"
			c := run(t, image, runOpts{
				docker: []string{"-v", dir + ":/var/lib/tether"},
				env:    append(w.env(), tc.env...),
				args:   []string{"runner", "--sandboxes", fmt.Sprint(sandboxes), "--label", label},
			})
			if got := len(created(c.ready())); got != sandboxes {
				t.Fatalf("the runner created %d sandboxes, want %d", got, sandboxes)
			}
			// The backstop is applied in the background after each observe.
			testutil.Eventually(t, "the auto-stop backstop on every sandbox", func() (bool, string) {
				for _, sb := range w.ours(label) {
					if sb.AutoStopInterval != config.DefaultDaytonaAutoStop {
						return false, fmt.Sprintf("sandbox %s has auto-stop %d", sb.ID, sb.AutoStopInterval)
					}
				}
				return true, ""
			})
			w.sim.SetFaults(daytonatest.Faults{Latency: 10 * time.Minute, Routes: []string{daytonatest.RouteDelete}})

			_, code := c.stop("2")
			if code != tc.wantCode {
				t.Errorf("exit %d, want %d", code, tc.wantCode)
			}
			stderr := c.stderr.String()
			if tc.wantCode == exitTERM {
				if total, _, left := drainReport(t, stderr); total != sandboxes || left != sandboxes {
					t.Errorf("report: %d intents, %d left live; want %d, %d", total, left, sandboxes, sandboxes)
				}
				if n := strings.Count(stderr, "tether:   unresolved tether-"); n != sandboxes {
					t.Errorf("the report names %d unresolved intents, want %d:\n%s", n, sandboxes, stderr)
				}
			}
			if live := liveIntents(t, dir); len(live) != sandboxes {
				t.Errorf("%d intents live in the journal, want %d", len(live), sandboxes)
			}
			for _, sb := range w.ours(label) {
				if sb.State != "started" || sb.AutoStopInterval != config.DefaultDaytonaAutoStop {
					t.Errorf("sandbox %s: state %s, auto-stop %d; want started (the deletes hung), bounded by auto-stop %d", sb.ID, sb.State, sb.AutoStopInterval, config.DefaultDaytonaAutoStop)
				}
			}

			// Daytona answers again: the next boot replays the journal.
			w.sim.SetFaults(daytonatest.Faults{})
			next := run(t, image, runOpts{
				docker: []string{"-v", dir + ":/var/lib/tether"},
				env:    w.env(),
				args:   []string{"runner", "--sandboxes", "0", "--wait-idle", "--label", "short-next"},
			})
			if code := next.wait(); code != 0 {
				t.Fatalf("the next container exited %d, want 0", code)
			}
			w.assertAllDestroyed(label, sandboxes)
		})
	}
}

// TestDockerPID1 checks what PID 1 owes the container: orphans reaped, and
// the exit codes the README documents.
func TestDockerPID1(t *testing.T) {
	for _, tc := range []struct {
		name   string
		docker []string
	}{
		{"orphans reaped as PID 1", nil},
		// Docker's init is PID 1; tether, a subreaper, still gets its
		// descendants' orphans.
		{"orphans reaped under --init", []string{"--init"}},
	} {
		t.Run(tc.name, func(t *testing.T) { orphansReaped(t, tc.docker) })
	}

	for _, tc := range []struct {
		name   string
		docker []string
		args   []string
		want   int
	}{
		{"child's code", nil, []string{"probe", "exit", "7"}, 7},
		{"child killed by SIGHUP", nil, []string{"probe", "kill", "1"}, 128 + 1},
		{"command not found", nil, []string{"no-such-command"}, 127},
		{"not executable", nil, []string{"/etc/ssl/certs/ca-certificates.crt"}, 126},
		{"tether's own error", []string{"--entrypoint", "tether"}, []string{"run", "--grace", "soon", "--", "probe", "exit", "0"}, 125},
		{"child's code under --init", []string{"--init"}, []string{"probe", "exit", "7"}, 7},
	} {
		t.Run("exit code: "+tc.name, func(t *testing.T) {
			c := run(t, image, runOpts{docker: tc.docker, args: tc.args})
			if code := c.wait(); code != tc.want {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tc.want, c.stderr)
			}
		})
	}
}

// TestDockerInitAndUser: under `docker run --init` (tether is not PID 1)
// and as `--user 1000` with the default paths (Docker sets HOME=/), the
// sandboxes are still all destroyed on docker stop; as the user, the journal
// lands on the volume, and `docker exec C tether intent ls` finds the
// socket without a flag, as that user and as root.
func TestDockerInitAndUser(t *testing.T) {
	const sandboxes = 5
	for _, tc := range []struct {
		name   string
		docker []string
	}{
		{"init", []string{"--init"}},
		{"user 1000", []string{"--user", "1000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			vol := newVolume(t)
			label := strings.ReplaceAll(tc.name, " ", "-")
			c := run(t, image, runOpts{
				docker: append([]string{"-v", vol + ":/var/lib/tether"}, tc.docker...),
				env:    w.env(),
				args:   []string{"runner", "--sandboxes", fmt.Sprint(sandboxes), "--label", label},
			})
			ids := created(c.ready())
			if len(ids) != sandboxes {
				t.Fatalf("the runner created %d sandboxes, want %d", len(ids), sandboxes)
			}
			for _, as := range [][]string{nil, {"--user", "0"}} {
				out, err := c.exec(as, "tether", "intent", "ls")
				if err != nil {
					t.Fatalf("docker exec %v tether intent ls: %v\n%s", as, err, out)
				}
				if n := strings.Count(out, `"state":"observed"`); n != sandboxes {
					t.Errorf("docker exec %v tether intent ls: %d observed intents, want %d:\n%s", as, n, sandboxes, out)
				}
			}
			uid := "0"
			if tc.name == "user 1000" {
				uid = "1000"
			}
			if out, err := c.exec(nil, "probe", "stat", config.StateDir+"/uid-"+uid+"/journal.db"); err != nil {
				t.Errorf("the journal is not at %s/uid-%s/journal.db (on the volume): %v %s", config.StateDir, uid, err, out)
			}
			if _, code := c.stop(); code != exitTERM {
				t.Errorf("exit %d, want %d", code, exitTERM)
			}
			w.assertAllDestroyed(label, sandboxes)
		})
	}
}

// TestDockerTLS: Daytona over https with a CA of its own (httptest's). An
// image that adds the CA to its bundle (COPY a bundle over
// /etc/ssl/certs/ca-certificates.crt) works, and so does the image with a
// bundle mounted and named by SSL_CERT_FILE; the image without it cannot
// reach Daytona at all, and says why.
//
// tether has no provider check at start: without the CA it still starts,
// the runner's creates fail, and the drain reports every intent unresolved
// with the x509 error. That is what is asserted.
func TestDockerTLS(t *testing.T) {
	const sandboxes = 5
	w, ca := newTLSWorld(t)

	dir := t.TempDir()
	bundle, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca-certificates.crt"), append(bundle, ca...), 0o644); err != nil {
		t.Fatal(err)
	}
	dockerfile := "FROM " + image + "\nCOPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt\n"
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		t.Fatal(err)
	}
	withCA := image + "-ca"
	if err := dockerBuild(dir, withCA); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { docker(t, "rmi", "-f", withCA) })

	t.Run("with the CA in the bundle", func(t *testing.T) {
		c := run(t, withCA, runOpts{env: w.env(), args: []string{"runner", "--sandboxes", fmt.Sprint(sandboxes), "--label", "tls"}})
		if got := len(created(c.ready())); got != sandboxes {
			t.Fatalf("the runner created %d sandboxes, want %d", got, sandboxes)
		}
		if _, code := c.stop(); code != exitTERM {
			t.Errorf("exit %d, want %d", code, exitTERM)
		}
		w.assertAllDestroyed("tls", sandboxes)
	})

	t.Run("with SSL_CERT_FILE naming a mounted bundle", func(t *testing.T) {
		c := run(t, image, runOpts{
			docker: []string{"-v", filepath.Join(dir, "ca-certificates.crt") + ":/etc/tether-ca/bundle.crt:ro"},
			env:    append(w.env(), "SSL_CERT_FILE=/etc/tether-ca/bundle.crt"),
			args:   []string{"runner", "--sandboxes", fmt.Sprint(sandboxes), "--label", "tls-env"},
		})
		if got := len(created(c.ready())); got != sandboxes {
			t.Fatalf("the runner created %d sandboxes, want %d", got, sandboxes)
		}
		if _, code := c.stop(); code != exitTERM {
			t.Errorf("exit %d, want %d", code, exitTERM)
		}
		w.assertAllDestroyed("tls-env", sandboxes)
	})

	t.Run("without", func(t *testing.T) {
		c := run(t, image, runOpts{env: w.env(), args: []string{"runner", "--sandboxes", "2", "--label", "tls-no-ca"}})
		lines := c.ready()
		if got := len(created(lines)); got != 0 {
			t.Fatalf("the runner created %d sandboxes without the CA", got)
		}
		if _, code := c.stop(); code != exitTERM {
			t.Errorf("exit %d, want %d", code, exitTERM)
		}
		stderr := c.stderr.String()
		if _, _, left := drainReport(t, stderr); left != 2 {
			t.Errorf("%d intents left live, want 2", left)
		}
		if !strings.Contains(stderr, "x509: certificate signed by unknown authority") {
			t.Errorf("tether's stderr does not name the x509 error:\n%s", stderr)
		}
		if n := len(w.ours("tls-no-ca")); n != 0 {
			t.Errorf("%d sandboxes reached the simulator without the CA", n)
		}
	})
}

// orphansReaped: the probe leaves 5 orphans that exit 300 ms in; none may
// stay a zombie.
func orphansReaped(t *testing.T, dockerOpts []string) {
	c := run(t, image, runOpts{docker: dockerOpts, args: []string{"probe", "orphans", "5"}})
	var orphans []string
	for _, l := range c.ready() {
		if len(l.fields) == 2 && l.fields[0] == "orphan" {
			orphans = append(orphans, l.fields[1])
		}
	}
	if len(orphans) != 5 {
		t.Fatalf("%d orphans, want 5", len(orphans))
	}
	// The orphans' parent is gone; they end 300 ms in. Unreaped, each
	// would stay a zombie of PID 1 for good.
	testutil.Eventually(t, "the orphans reaped", func() (bool, string) {
		out, err := c.exec(nil, "probe", "pids")
		if err != nil {
			return false, fmt.Sprintf("probe pids: %v: %s", err, out)
		}
		for _, l := range strings.Split(out, "\n") {
			f := strings.Fields(l)
			if len(f) == 2 && slices.Contains(orphans, f[0]) {
				return false, fmt.Sprintf("orphan %s is in state %s", f[0], f[1])
			}
			if len(f) == 2 && f[1] == "Z" {
				return false, fmt.Sprintf("zombie %s", f[0])
			}
		}
		return true, ""
	})
	if _, code := c.stop(); code != 0 {
		t.Errorf("exit %d, want 0 (the probe exits 0 on SIGTERM)", code)
	}
}

// TestDockerRestartReusedKeys: `docker restart` of a runner that declares
// its sandboxes with the same idempotency keys on every start (the sample
// runner's keys are <label>-<i>). The first start's sandboxes are drained
// on the stop; the second start must get intents it can use for its new
// sandboxes, and the final docker stop must leave none of either start.
func TestDockerRestartReusedKeys(t *testing.T) {
	const sandboxes = 5
	w := newWorld(t)
	c := run(t, image, runOpts{
		docker: []string{"-v", newVolume(t) + ":/var/lib/tether"},
		env:    w.env(),
		args:   []string{"runner", "--sandboxes", fmt.Sprint(sandboxes), "--label", "restart"},
	})
	if got := len(created(c.ready())); got != sandboxes {
		t.Fatalf("the runner created %d sandboxes, want %d", got, sandboxes)
	}
	mustDocker(t, "restart", c.name)
	testutil.Eventually(t, "the restarted runner's sandboxes", func() (bool, string) {
		if running := mustDocker(t, "inspect", "-f", "{{.State.Running}}", c.name); running != "true" {
			logs, _ := docker(t, "logs", c.name)
			t.Fatalf("the restarted container is not running; logs:\n%s", logs)
		}
		n := 0
		for _, sb := range w.ours("restart") {
			if sb.State == "started" {
				n++
			}
		}
		return n == sandboxes, fmt.Sprintf("%d started", n)
	})
	mustDocker(t, "stop", c.name)
	if code := mustDocker(t, "inspect", "-f", "{{.State.ExitCode}}", c.name); code != fmt.Sprint(exitTERM) {
		logs, _ := docker(t, "logs", c.name)
		t.Errorf("exit %s, want %d; logs:\n%s", code, exitTERM, logs)
	}
	w.assertAllDestroyed("restart", 2*sandboxes)
}
