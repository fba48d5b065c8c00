package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/testutil"

	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tether-run/tether/intentapi"

	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// TestRestartReusingKeysLeaksNothing: a runner that is restarted (docker
// restart: a new tether run on the same journal) declares its sandboxes
// with the same idempotency keys as before. The first run's intents have
// ended (the runner released them); the second run must get new intents with
// new names, not the finished ones, so every sandbox it creates is observed,
// drained, and gone in the simulator's record.
func TestRestartReusingKeysLeaksNothing(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p1 := w.run([]string{"--drain-timeout", drainTimeout}, "--sandboxes", "3", "--released", "3", "--exit", "0")
	out1 := p1.ready()
	if code := p1.wait(); code != 0 {
		t.Fatalf("first run exited %d:\n%s", code, p1.stderr)
	}
	first := out1.of("released")
	if len(first) != 3 {
		t.Fatalf("first run: %+v", out1.lines)
	}
	w.eventuallyDestroyed(ids(first, sandboxOf)...)

	p2 := w.run([]string{"--drain-timeout", drainTimeout}, "--sandboxes", "3", "--exit", "0")
	out2 := p2.ready()
	if code := p2.wait(); code != 0 {
		t.Fatalf("second run exited %d:\n%s", code, p2.stderr)
	}
	second := out2.of("created")
	if len(second) != 3 {
		t.Fatalf("second run created %d sandboxes, want 3: %+v", len(second), out2.lines)
	}
	old := map[string]bool{}
	for _, l := range first {
		old[l.name] = true
	}
	for _, l := range second {
		if old[l.name] {
			t.Errorf("the restarted runner was handed the finished intent %s again", l.name)
		}
	}
	w.assertDestroyed(ids(second, sandboxOf)...)
	for _, sb := range w.ours() {
		if sb.State != "destroyed" {
			t.Errorf("sandbox %s (%s) leaked: %s", sb.ID, sb.Name, sb.State)
		}
	}
}

// TestSpoolRunnerWithScopeLabels: a runner that only writes spool files
// (no socket), under `tether run --label team=x`, declares an intent with
// an id of its own choosing, creates the sandbox with exactly the name and
// labels `tether intent new` printed, and reports the id; then it is
// killed. The drain must find the sandbox ours — name tether-<its id>, the
// scope label included — and delete it, in the simulator's record.
func TestSpoolRunnerWithScopeLabels(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	// The runner: a shell script using the CLI without a socket. The
	// sandbox is created by the test (as the runner's Daytona SDK would)
	// from the name and labels the CLI printed, which the script saves.
	printed := filepath.Join(w.dir, "intent.json")
	script := `unset TETHER_SOCKET; ` + bin.tether + ` intent new --key job-7 --label step=build > ` + printed + ` && echo ready && exec sleep 600`
	p := w.start(append(w.tetherArgs("run"), "--drain-timeout", drainTimeout, "--label", "team=x", "--", "sh", "-c", script)...)
	if l := p.line(); l != "ready" {
		t.Fatalf("runner said %q; stderr:\n%s", l, p.stderr)
	}
	raw, err := os.ReadFile(printed)
	if err != nil {
		t.Fatal(err)
	}
	in := decodeIntentJSON(t, raw)
	if in.ID != "job-7" || in.Name != "tether-job-7" || in.Labels["team"] != "x" || in.Labels["e2e"] != "yes" ||
		in.Labels["step"] != "build" || in.Labels[intent.LabelOwner] != w.owner || in.Labels[intent.LabelIntent] != "job-7" {
		t.Fatalf("the CLI printed %+v", in)
	}
	off := 0
	sb, err := w.sim.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Name: in.Name, Labels: in.Labels, AutoStopInterval: &off})
	if err != nil {
		t.Fatal(err)
	}
	octx, ocancel := context.WithTimeout(t.Context(), waitBound)
	defer ocancel()
	observe := exec.CommandContext(octx, bin.tether, "intent", "observe", in.ID, sb.ID)
	observe.WaitDelay = pipeDelay
	observe.Env = append(append([]string{}, w.env...), "TETHER_SPOOL="+w.spool)
	if out, err := observe.CombinedOutput(); err != nil {
		t.Fatalf("observe through the spool: %v\n%s", err, out)
	}
	testutil.Eventually(t, "the spool files journaled", func() (bool, string) {
		got, err := w.client().Get(t.Context(), in.ID)
		return err == nil && got.SandboxID == sb.ID, fmt.Sprintf("intent %+v, %v", got, err)
	})
	if code := p.stop(syscall.SIGTERM); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("tether exited %d:\n%s", code, p.stderr)
	}
	w.assertDestroyed(sb.ID)
	w.assertJournal(intent.Gone, in.ID)
	if strings.Contains(p.stderr.String(), "foreign") && !strings.Contains(p.stderr.String(), "foreign        0") {
		t.Fatalf("the spool runner's sandbox was judged foreign:\n%s", p.stderr)
	}
}

func decodeIntentJSON(t *testing.T, raw []byte) intentapi.Intent {
	t.Helper()
	var in intentapi.Intent
	if err := json.Unmarshal(raw, &in); err != nil {
		t.Fatalf("not an intent: %q: %v", raw, err)
	}
	return in
}
