package e2e_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// The TypeScript and Python SDKs read DAYTONA_* from the environment, then
// .env.local, then .env in the working directory. tether sets the child's
// DAYTONA_API_URL to its proxy, so it reads the same files for where to
// forward and for its own credentials.

// projectDir is a directory with the given files (name → content), each
// mode 0600, where tether runs (env -C) as a runner's project would.
func (w *world) projectDir(files map[string]string) string {
	w.t.Helper()
	dir := filepath.Join(w.dir, "project")
	if err := os.Mkdir(dir, 0o755); err != nil {
		w.t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			w.t.Fatal(err)
		}
	}
	w.wrap = []string{"env", "-C", dir}
	return dir
}

// TestDotEnvChoosesTheUpstreamAndTethersCredentials: a runner whose
// project keeps the Daytona URL and key in .env (the environment has no
// DAYTONA_* at all) creates through the proxy, which forwards to the URL of
// .env; the drain deletes the sandbox with the key of .env; and tether says
// at start where each setting came from.
func TestDotEnvChoosesTheUpstreamAndTethersCredentials(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.env = withoutDaytona(w.env)
	w.projectDir(map[string]string{
		".env": "# the runner's project\nDAYTONA_API_URL=" + w.sim.URL + "\nexport DAYTONA_API_KEY=\"" + daytonatest.DefaultKey + "\"\nOTHER=1\n",
	})
	// The runner's SDK would take its key from .env too; proxyrunner is
	// given it as an argument.
	p := w.runZeroCode([]string{"--drain-timeout", drainTimeout}, "key:"+daytonatest.DefaultKey, "create:1")
	out := p.ready()
	created := out.of("created")
	if len(created) != 1 {
		t.Fatalf("runner: %+v\n%s", out.lines, p.stderr)
	}
	if code := p.stop(syscall.SIGTERM); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("tether exited %d; stderr:\n%s", code, p.stderr)
	}
	w.assertDestroyed(created[0].sandbox)
	for _, in := range w.intents() {
		if in.State != intent.Gone {
			t.Errorf("intent %s: %s (%s)", in.ID, in.State, in.LastError)
		}
	}
	stderr := p.stderr.String()
	if l := lineWith(stderr, "where each setting came from"); !strings.Contains(l, "DAYTONA_API_URL=.env") || !strings.Contains(l, "DAYTONA_API_KEY=.env") || strings.Contains(l, "DAYTONA_TARGET") {
		t.Errorf("start-up line %q, want DAYTONA_API_URL and DAYTONA_API_KEY from .env, nothing of what is unset", l)
	}
	if strings.Contains(stderr, daytonatest.DefaultKey) {
		t.Errorf("the key of .env is in tether's stderr")
	}
}

// TestDotEnvPrecedence: the environment over .env.local over .env, per
// variable, as the SDKs read them. The losing values point nowhere, so a
// wrong precedence fails the create or the drain.
func TestDotEnvPrecedence(t *testing.T) {
	t.Parallel()
	const nowhere = "http://127.0.0.1:1/api"
	w := newWorld(t)
	w.env = append(withoutDaytona(w.env), "DAYTONA_API_KEY="+daytonatest.DefaultKey, "DAYTONA_TARGET=")
	w.projectDir(map[string]string{
		".env.local": "DAYTONA_API_URL=" + w.sim.URL + "\n",
		".env":       "DAYTONA_API_URL=" + nowhere + "\nDAYTONA_API_KEY=dtn_wrong\nDAYTONA_TARGET=eu\n",
	})
	p := w.runZeroCode([]string{"--drain-timeout", drainTimeout}, "create:1")
	out := p.ready()
	created := out.of("created")
	if len(created) != 1 {
		t.Fatalf("runner: %+v\n%s", out.lines, p.stderr)
	}
	if code := p.stop(syscall.SIGTERM); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("tether exited %d; stderr:\n%s", code, p.stderr)
	}
	w.assertDestroyed(created[0].sandbox)
	l := lineWith(p.stderr.String(), "where each setting came from")
	for _, want := range []string{"DAYTONA_API_URL=.env.local", "DAYTONA_API_KEY=env"} {
		if !strings.Contains(l, want) {
			t.Errorf("start-up line %q lacks %s", l, want)
		}
	}
	// Set empty in the environment, it wins over .env, and is unset.
	if strings.Contains(l, "DAYTONA_TARGET") {
		t.Errorf("start-up line %q names DAYTONA_TARGET, set empty in the environment", l)
	}
}

// TestDotEnvUntrusted: a .env another user could have written is ignored
// with a warning naming it, and its credentials are not used.
func TestDotEnvUntrusted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		make func(t *testing.T, path string)
		says string
	}{
		{"writable by others", func(t *testing.T, path string) {
			if err := os.Chmod(path, 0o666); err != nil {
				t.Fatal(err)
			}
		}, "chmod go-w"},
		{"owned by another user", func(t *testing.T, path string) {
			if os.Geteuid() != 0 {
				t.Skip("needs root to chown")
			}
			if err := os.Chown(path, otherUser, otherUser); err != nil {
				t.Fatal(err)
			}
		}, "owned by uid 1000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			w.env = append(withoutDaytona(w.env), "DAYTONA_API_URL="+w.sim.URL)
			dir := w.projectDir(map[string]string{".env": "DAYTONA_API_KEY=" + daytonatest.DefaultKey + "\n"})
			path := filepath.Join(dir, ".env")
			tc.make(t, path)
			code, stderr := w.runTether(append(w.tetherArgs("run"), "--", "true")...)
			if code != 0 {
				t.Fatalf("tether exited %d:\n%s", code, stderr)
			}
			if lineWith(stderr, "level=WARN", path, tc.says, "ignored") == "" {
				t.Errorf("no warning naming %s and %q:\n%s", path, tc.says, stderr)
			}
			if l := lineWith(stderr, "where each setting came from"); l == "" || strings.Contains(l, "DAYTONA_API_KEY") {
				t.Errorf("start-up line %q: the key of the ignored file was taken", l)
			}
			if lineWith(stderr, "no daytona provider", "DAYTONA_API_KEY") == "" {
				t.Errorf("tether did not say it has no credentials:\n%s", stderr)
			}
		})
	}
}
