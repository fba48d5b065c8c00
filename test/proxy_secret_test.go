package e2e_test

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// otherUser is the uid of another local user, as on a shared host.
const otherUser = 1000

// asUser returns the command line prefix that runs a program as uid (and
// gid) with no supplementary groups, or skips the test with the reason.
func asUser(t *testing.T, uid int) []string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to act as another uid (setpriv); run the suite as root, as .ci/run does")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv not installed (util-linux; .ci/run installs it)")
	}
	return []string{setpriv, fmt.Sprintf("--reuid=%d", uid), fmt.Sprintf("--regid=%d", uid), "--clear-groups"}
}

// copyExecutable copies the program at src into w.dir/bin as name, where
// another user can run it (once w.nobodyCan).
func (w *world) copyExecutable(src, name string) string {
	w.t.Helper()
	dir := filepath.Join(w.dir, "bin")
	os.Mkdir(dir, 0o755)
	dst := filepath.Join(dir, name)
	in, err := os.Open(src)
	if err != nil {
		w.t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		w.t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		w.t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		w.t.Fatal(err)
	}
	return dst
}

// TestProxyServesOnlyItsRunner: another local user who finds the proxy's
// port (any user can reach a loopback port) and calls it as the Daytona
// API — with another organisation's key, then with tether's own — is
// refused every time: nothing is journaled, nothing reaches Daytona, a
// flood is one or two log lines, and the secret of the URL the runner got
// is in neither tether's stderr nor the journal file. The runner with that
// URL works throughout.
func TestProxyServesOnlyItsRunner(t *testing.T) {
	t.Parallel()
	prefix := asUser(t, otherUser)
	w := newWorld(t)
	w.nobodyCan()
	runner := zeroCodeRunner(t)
	attacker := w.copyExecutable(runner, filepath.Base(runner))
	if id, err := exec.Command(prefix[0], append(prefix[1:], "id", "-u")...).Output(); err != nil || strings.TrimSpace(string(id)) != fmt.Sprint(otherUser) {
		t.Fatalf("%v id -u: %q %v", prefix, id, err)
	}

	p := w.runZeroCode([]string{"--drain-timeout", drainTimeout}, "url", "create:1")
	out := p.ready()
	created := out.of("created")
	if len(created) != 1 {
		t.Fatalf("runner: %+v", out.lines)
	}
	u, err := url.Parse(out.of("url")[0].name)
	if err != nil {
		t.Fatal(err)
	}
	secret, rest, _ := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
	if len(secret) < 32 || "/"+rest != "/api" || u.Hostname() != "127.0.0.1" {
		t.Fatalf("the runner's DAYTONA_API_URL is %s, want http://127.0.0.1:PORT/<secret>/api", u)
	}

	// What another user can know: the port, and that it is Daytona's
	// API. The runner's environment is not readable to it.
	guesses := []string{
		"http://" + u.Host + "/api",
		"http://" + u.Host + "/" + strings.Repeat("0", len(secret)) + "/api",
		"http://" + u.Host + "/api/" + secret, // the secret where it does not belong still opens nothing
	}
	const flood = 100
	for i, guess := range guesses {
		actions := []string{"key:other-key", "fail", "key:" + daytonatest.DefaultKey}
		if i == 0 {
			for range flood {
				actions = append(actions, "fail")
			}
		} else {
			actions = append(actions, "fail")
		}
		ctx, cancel := context.WithTimeout(context.Background(), exitBound)
		cmd := exec.CommandContext(ctx, prefix[0], append(append(prefix[1:], attacker), append(actions, "exit")...)...)
		cmd.Env = []string{"DAYTONA_API_URL=" + guess, "PATH=" + os.Getenv("PATH")}
		got, err := cmd.Output()
		cancel()
		if err != nil {
			t.Fatalf("the other user's runner at %s: %v\n%s", guess, err, got)
		}
		lines := strings.Split(strings.TrimSpace(string(got)), "\n")
		refused := 0
		for _, l := range lines {
			if l == "failed - 403 -" {
				refused++
			} else if strings.HasPrefix(l, "failed") {
				t.Errorf("at %s: %s, want 403", guess, l)
			}
		}
		if want := len(actions) - 2; refused != want {
			t.Errorf("at %s: %d creates refused, want %d:\n%s", guess, refused, want, got)
		}
	}

	// Refused before anything: the journal holds the runner's one intent,
	// and Daytona received its one create.
	live, err := w.liveIntents()
	if err != nil {
		t.Fatal(err)
	}
	if len(live) != 1 {
		t.Errorf("%d live intents, want the runner's 1", len(live))
	}
	if n := w.sim.Calls()[daytonatest.RouteCreate]; n != 1 {
		t.Errorf("Daytona received %d creates, want the runner's 1", n)
	}
	if code := p.stop(syscall.SIGTERM); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("tether exited %d; stderr:\n%s", code, p.stderr)
	}
	w.assertDestroyed(created[0].sandbox)
	recorded := w.intents()
	if len(recorded) != 1 {
		t.Errorf("the journal holds %d intents, want the runner's 1: %v", len(recorded), recorded)
	}
	for _, in := range recorded {
		if in.State != intent.Gone {
			t.Errorf("intent %s: %s", in.ID, in.State)
		}
	}
	if n := w.sim.Calls()[daytonatest.RouteCreate]; n != 1 {
		t.Errorf("Daytona received %d creates, want the runner's 1", n)
	}
	stderr := p.stderr.String()
	if n := len(linesWith(stderr, "refused requests without this run's secret")); n < 1 || n > 2 {
		t.Errorf("%d lines about %d refused requests, want 1 or 2 (at most one a minute, and the rest at the end):\n%s", n, flood+4, stderr)
	}
	if strings.Contains(stderr, secret) {
		t.Errorf("the secret is in tether's stderr:\n%s", stderr)
	}
	raw, err := os.ReadFile(w.journal)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), secret) {
		t.Error("the secret is in the journal file")
	}
}
