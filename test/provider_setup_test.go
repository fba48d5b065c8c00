package e2e_test

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tether-run/tether/internal/testutil"

	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// TestBrokenProviderSetupIsSaidAtStart: for each broken Daytona setup,
// tether says what is wrong on stderr, at warn level or above, right after
// start — while the child runs, long before any drain — naming what to
// fix; and with --require-provider it exits 125 without starting the child.
func TestBrokenProviderSetupIsSaidAtStart(t *testing.T) {
	t.Parallel()
	// A TLS server whose CA the binary does not have.
	untrusted := httptest.NewUnstartedServer(http.NotFoundHandler())
	untrusted.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	untrusted.StartTLS()
	t.Cleanup(untrusted.Close)

	cases := []struct {
		name  string
		env   func(w *world) []string // DAYTONA_* (and more) for this setup
		level string                  // of the line said at start; "" when it is fatal without --require-provider
		says  []string                // what that line (and the exit error) names
	}{
		{"no credentials", func(w *world) []string {
			return []string{"DAYTONA_API_URL=" + w.sim.URL}
		}, "WARN", []string{"DAYTONA_API_KEY"}},
		{"malformed DAYTONA_API_URL", func(w *world) []string {
			return []string{"DAYTONA_API_KEY=" + daytonatest.DefaultKey, "DAYTONA_API_URL=localhost:3000/api"}
		}, "", []string{"DAYTONA_API_URL", `"localhost:3000/api"`}},
		{"https to a server whose CA tether lacks", func(w *world) []string {
			return []string{"DAYTONA_API_KEY=" + daytonatest.DefaultKey, "DAYTONA_API_URL=" + untrusted.URL + "/api"}
		}, "ERROR", []string{"certificate", "SSL_CERT_FILE"}},
		{"https and no CA bundle at all", func(w *world) []string {
			return []string{"DAYTONA_API_KEY=" + daytonatest.DefaultKey, "DAYTONA_API_URL=" + untrusted.URL + "/api",
				"SSL_CERT_FILE=" + filepath.Join(w.dir, "no-bundle.pem"), "SSL_CERT_DIR=" + filepath.Join(w.dir, "no-certs")}
		}, "ERROR", []string{"no CA certificates", "DAYTONA_API_URL"}},
		{"a wrong key", func(w *world) []string {
			return []string{"DAYTONA_API_KEY=dtn_wrong_key", "DAYTONA_API_URL=" + w.sim.URL}
		}, "ERROR", []string{"401", "DAYTONA_API_KEY"}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			t.Run("said at start", func(t *testing.T) {
				w := newWorld(t)
				w.env = append(withoutDaytona(w.env), tc.env(w)...)
				if tc.level == "" {
					// A URL tether cannot call at all (the proxy would
					// forward to it too): one error, not a warning that
					// promises to go on.
					code, stderr := w.runTether(append(w.tetherArgs("run"), "--", "sh", "-c", "exit 0")...)
					if code != 125 || len(linesWith(stderr, tc.says...)) != 1 || strings.Contains(stderr, "level=WARN") {
						t.Fatalf("tether exited %d, want 125 and one line naming %q:\n%s", code, tc.says, stderr)
					}
					return
				}
				p := w.start(append(w.tetherArgs("run"), "--drain-timeout", drainTimeout, "--", "sh", "-c", "echo ready; exec sleep 600")...)
				if l := p.line(); l != "ready" {
					t.Fatalf("child said %q; stderr:\n%s", l, p.stderr)
				}
				testutil.Eventually(t, "the broken setup said on stderr", func() (bool, string) {
					select {
					case <-p.Done():
						return false, "tether exited"
					default:
					}
					return lineWith(p.stderr.String(), append([]string{"level=" + tc.level}, tc.says...)...) != "", p.stderr.String()
				})
				if lines := len(linesWith(p.stderr.String(), tc.says...)); lines != 1 {
					t.Errorf("said %d times, want once:\n%s", lines, p.stderr)
				}
				if code := p.stop(syscall.SIGTERM); code != 128+int(syscall.SIGTERM) {
					t.Fatalf("tether exited %d:\n%s", code, p.stderr)
				}
			})
			t.Run("fatal with --require-provider", func(t *testing.T) {
				w := newWorld(t)
				w.env = append(withoutDaytona(w.env), tc.env(w)...)
				require := []string{"--require-provider"}
				if i%2 == 1 { // the variable instead of the flag
					w.env, require = append(w.env, "TETHER_REQUIRE_PROVIDER=true"), nil
				}
				marker := filepath.Join(w.dir, "child-started")
				args := append(append(w.tetherArgs("run"), require...), "--", "sh", "-c", "touch "+marker+"; exec sleep 600")
				code, stderr := w.runTether(args...)
				if code != 125 {
					t.Fatalf("tether exited %d, want 125:\n%s", code, stderr)
				}
				if _, err := os.Stat(marker); err == nil {
					t.Fatal("the child was started")
				}
				needs := []string{"require-provider"}
				if tc.level == "" {
					needs = nil // fatal with or without it
				}
				if lineWith(stderr, append(needs, tc.says...)...) == "" {
					t.Fatalf("stderr does not say %q with --require-provider:\n%s", tc.says, stderr)
				}
			})
		})
	}

	t.Run("a good setup passes --require-provider", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t)
		p := w.start(append(w.tetherArgs("run"), "--require-provider", "--", "sh", "-c", "echo ready; exec sleep 600")...)
		if l := p.line(); l != "ready" {
			t.Fatalf("child said %q; stderr:\n%s", l, p.stderr)
		}
		if code := p.stop(syscall.SIGTERM); code != 128+int(syscall.SIGTERM) {
			t.Fatalf("tether exited %d:\n%s", code, p.stderr)
		}
		if l := lineWith(p.stderr.String(), "provider"); l != "" {
			t.Fatalf("a good setup was reported: %s", l)
		}
	})
}

// withoutDaytona is env without any DAYTONA_* variable.
func withoutDaytona(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "DAYTONA_") {
			out = append(out, kv)
		}
	}
	return out
}

// lineWith returns the first line of s that contains every one of words.
func lineWith(s string, words ...string) string {
	if lines := linesWith(s, words...); len(lines) > 0 {
		return lines[0]
	}
	return ""
}

// linesWith returns the lines of s that contain every one of words.
func linesWith(s string, words ...string) []string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		all := true
		for _, w := range words {
			if !strings.Contains(line, w) {
				all = false
				break
			}
		}
		if all {
			out = append(out, line)
		}
	}
	return out
}
