package e2e_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/testutil"
)

// TestProvidersNamed, with the real binary, what an operator reads about
// providers: the start-up line names each provider's proxy (the child's
// E2B_API_URL too, not only its DAYTONA_API_URL); a declaration naming a
// provider tether has no setup for is refused with that setup's reason
// (no E2B credentials: set E2B_API_KEY), not as an unknown provider; and
// an intent declared without a provider, through the spool, is Daytona's
// from the start (tether intent new prints it so, and the journal holds
// it so), never "provider":"".
func TestProvidersNamed(t *testing.T) {
	t.Parallel()
	t.Run("the start-up line names every proxy", func(t *testing.T) {
		t.Parallel()
		w := newE2BWorld(t)
		p := w.world.sleeper(nil)
		testutil.Eventually(t, "the start-up line", func() (bool, string) {
			return strings.Contains(p.stderr.String(), "where this run keeps its state"), p.stderr.String()
		})
		var line string
		for _, l := range strings.Split(p.stderr.String(), "\n") {
			if strings.Contains(l, "where this run keeps its state") {
				line = l
			}
		}
		for _, want := range []string{"daytona_proxy=", "e2b_proxy=http://127.0.0.1:"} {
			if !strings.Contains(line, want) {
				t.Errorf("the start-up line does not name %q:\n%s", want, line)
			}
		}
		p.stop(syscall.SIGTERM)
	})

	t.Run("a provider without setup is refused with its reason", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t) // Daytona only: no E2B credentials
		p := w.sleeper(nil)
		out, err := exec.Command("curl", "-s", "--unix-socket", w.socket, "-X", "POST", "http://tether/v1/intents", "-d", `{"provider":"e2b"}`, "-w", " %{http_code}").Output()
		if err != nil {
			t.Skipf("SKIP: curl: %v", err)
		}
		if got := string(out); !strings.HasSuffix(got, " 400") || !strings.Contains(got, "no E2B credentials: set E2B_API_KEY") {
			t.Errorf(`{"provider":"e2b"} without E2B credentials: %s; want 400 saying no E2B credentials: set E2B_API_KEY`, got)
		}
		p.stop(syscall.SIGTERM)
	})

	t.Run("an intent without a provider is Daytona's", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t)
		if err := os.MkdirAll(w.spool, 0o700); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin.tether, "intent", "new", "--key", "job-9", "--spool", w.spool)
		cmd.Env = append(w.env, "TETHER_OWNER="+w.owner, "TETHER_SOCKET=")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("tether intent new through the spool: %v", err)
		}
		var printed struct{ Provider string }
		if err := json.Unmarshal(out, &printed); err != nil || printed.Provider != intent.DefaultProvider {
			t.Errorf("tether intent new printed provider %q (%s), want %q", printed.Provider, out, intent.DefaultProvider)
		}
		// tether drain takes the spool file into the journal first.
		code, stderr := w.runTether("drain", "--journal", w.journal, "--spool", w.spool, "--never-created-after", "1ms")
		if code != 0 {
			t.Fatalf("tether drain: exit %d; stderr:\n%s", code, stderr)
		}
		in, ok := w.intents()["job-9"]
		if !ok || in.Provider != intent.DefaultProvider {
			t.Errorf("the journal holds job-9 with provider %q (found %v), want %q", in.Provider, ok, intent.DefaultProvider)
		}
	})
}
