package demo

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/providers"
	"github.com/tether-run/tether/internal/testutil"
)

func TestMain(m *testing.M) { os.Exit(testutil.Main(m)) }

// tell tells the story on the default provider's stand-in with the real
// tether binary, and returns what it said.
func tell(t *testing.T, sandboxes int, faults string) string {
	t.Helper()
	k, ok := providers.Lookup(intent.DefaultProvider)
	if !ok {
		t.Fatal("no default provider in the registry")
	}
	var out testutil.Buffer
	s, err := NewStory(StoryOptions{Tether: testutil.Tether(t), Kind: k, Sandboxes: sandboxes, Faults: faults, Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 4*phaseTimeout)
	defer cancel()
	ok, err = s.Tell(ctx)
	if err != nil || !ok {
		t.Fatalf("the story: ok %v, %v\n%s", ok, err, out.String())
	}
	return out.String()
}

// listing is the lines of the stand-in's listing that starts with head
// (e.g. "Daytona, running:"): its "alive:" lines.
func listing(t *testing.T, out, head string) []string {
	t.Helper()
	i := strings.Index(out, head)
	if i < 0 {
		t.Fatalf("no listing %q:\n%s", head, out)
	}
	var alive []string
	for _, l := range strings.Split(out[i:], "\n")[1:] {
		if !strings.HasPrefix(l, "  alive: ") {
			break
		}
		alive = append(alive, l)
	}
	return alive
}

// TestStoryShowsTheBackstopTetherSet: the story says tether sets an
// auto-stop of 15 minutes on each sandbox the runner reports, and the
// listing after it, by the simulator's record, shows exactly that — never
// "auto-stop off" for a sandbox tether heard of, even when tether's
// setter call is slow (the backstop runs in the background after each
// observe, so the runner is ready before the last one lands). Only the
// sandbox whose id never reached tether runs without one, and says why.
func TestStoryShowsTheBackstopTetherSet(t *testing.T) {
	t.Parallel()
	const n = 3
	out := tell(t, n, "latency=400ms,routes=autostop")
	running := listing(t, out, "Daytona, running:")
	if len(running) != n {
		t.Fatalf("%d sandboxes alive while the first runner runs, want %d:\n%s", len(running), n, out)
	}
	for _, l := range running {
		if !strings.Contains(l, "(started, auto-stop 15 min)") {
			t.Errorf("while the first runner runs: %q, want auto-stop 15 min (tether's backstop):\n%s", l, out)
		}
	}
	leaked := listing(t, out, "Daytona, leaked:")
	if len(leaked) != n {
		t.Fatalf("%d sandboxes leaked by the kill -9, want %d:\n%s", len(leaked), n, out)
	}
	for i, l := range leaked {
		want := "(started, auto-stop 15 min)"
		if i == n-1 { // the one the runner never reported
			want = "(started, auto-stop off): its id never reached tether, so no backstop"
		}
		if !strings.Contains(l, want) {
			t.Errorf("after the kill -9: %q, want %q:\n%s", l, want, out)
		}
	}
}

// TestStoryFaultsAreItsProviders: a fault spec the stand-in does not know
// is a usage error, and nothing is left running.
func TestStoryFaultsAreItsProviders(t *testing.T) {
	k, _ := providers.Lookup(intent.DefaultProvider)
	_, err := NewStory(StoryOptions{Tether: "tether", Kind: k, Sandboxes: 2, Faults: "nosuch=1", Out: &testutil.Buffer{}})
	var ue *UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--faults") {
		t.Fatalf("NewStory with an unknown fault: %v, want a usage error naming --faults", err)
	}
}

// TestStoryLine: the story's sentence for each log line of tether it
// tells, and nothing for the rest.
func TestStoryLine(t *testing.T) {
	for _, c := range []struct{ line, want string }{
		{`time=x level=INFO msg="auto-stop was disabled; enforced" intent=i sandbox=0123456789ab minutes=15`, "sandbox 01234567… had auto-stop 0: set to 15 min, so Daytona stops it even if tether dies"},
		{`time=x level=INFO msg="stopping the child" signal=SIGTERM grace=3s`, "SIGTERM received: tether passes it to its runner (3s to exit), then drains"},
		{`time=x level=INFO msg="replay: done" elapsed=1s gone=4 unresolved=0`, "replay: done in 1s, 4 gone, 0 unresolved"},
		{`time=x level=WARN msg="something" a=b`, `time=x level=WARN msg="something" a=b`},
		{"tether: drain: 4 intents in 1s, 0 left live", "drain: 4 intents in 1s, 0 left live"},
		{"tether:   gone 4", ""},
		{`time=x level=INFO msg="listening"`, ""},
	} {
		if got := storyLine(c.line, "Daytona"); got != c.want {
			t.Errorf("storyLine(%q) = %q, want %q", c.line, got, c.want)
		}
	}
}

// TestExitMeaning: a code above 128 is explained as the runner's signal.
func TestExitMeaning(t *testing.T) {
	if got := exitMeaning(143); !strings.Contains(got, "143 = 128+15") || !strings.Contains(got, "SIGTERM") {
		t.Errorf("exitMeaning(143) = %q", got)
	}
	for _, code := range []int{0, 1, 125, 128 + 65} {
		if got := exitMeaning(code); got != "" {
			t.Errorf("exitMeaning(%d) = %q, want none", code, got)
		}
	}
}
