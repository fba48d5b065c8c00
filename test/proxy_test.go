package e2e_test

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/testutil"

	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// The zero-code runner (test/proxyrunner) knows nothing of tether: only
// DAYTONA_API_URL and DAYTONA_API_KEY, and the official api-client-go.
// tether's Daytona API proxy is all that covers its sandboxes.

// zeroCodeRunner is test/proxyrunner, built once per go test run.
func zeroCodeRunner(t *testing.T) string {
	t.Helper()
	return testutil.Build(t, testutil.Module+"/test/proxyrunner")
}

// runZeroCode starts `tether run [flags] -- proxyrunner actions...`.
func (w *world) runZeroCode(flags []string, actions ...string) *proc {
	// The world turns the proxy off for the socket-declaring sample
	// runner; the zero-code runner needs it on (the default outside tests).
	args := append(append(w.tetherArgs("run"), "--daytona-proxy=true"), flags...)
	args = append(args, "--", zeroCodeRunner(w.t))
	return w.start(append(args, actions...)...)
}

// TestProxyZeroCodeRunnerKilled: an unchanged runner creates 20 sandboxes
// through the proxy, deletes 5 itself, and is SIGKILLed. The drain deletes
// the other 15; the 5 are confirmed, not deleted a second time.
func TestProxyZeroCodeRunnerKilled(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := w.runZeroCode([]string{"--drain-timeout", drainTimeout}, "url", "create:20", "delete:5")
	out := p.ready()
	created, deleted := out.of("created"), out.of("deleted")
	if len(created) != 20 || len(deleted) != 5 {
		t.Fatalf("runner: %d created, %d deleted: %+v", len(created), len(deleted), out.lines)
	}
	if u := out.of("url"); len(u) != 1 || !strings.HasPrefix(u[0].name, "http://127.0.0.1:") || !strings.HasSuffix(u[0].name, "/api") {
		t.Fatalf("the runner's DAYTONA_API_URL is %+v, want tether's proxy on loopback", u)
	}
	deletesByRunner := w.sim.Calls()[daytonatest.RouteDelete]
	if deletesByRunner != 5 {
		t.Fatalf("%d deletes before the kill, want the runner's 5", deletesByRunner)
	}
	if err := syscall.Kill(out.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(); code != 128+int(syscall.SIGKILL) {
		t.Fatalf("tether exited %d, want the child's 137; stderr:\n%s", code, p.stderr)
	}

	// The simulator's record: every one of the 20 destroyed, and exactly one
	// delete each — 5 by the runner, 15 by the drain.
	w.assertDestroyed(ids(created, func(l runnerLine) string { return l.sandbox })...)
	if n := w.sim.Calls()[daytonatest.RouteDelete]; n != 20 {
		t.Errorf("Daytona received %d deletes, want 20 (5 by the runner, 15 by the drain)", n)
	}
	ours := w.ours()
	if len(ours) != 20 {
		t.Errorf("the simulator holds %d sandboxes of ours, want 20", len(ours))
	}
	for _, sb := range ours {
		in := sb.Labels[intent.LabelIntent]
		if sb.Labels["runner"] != "zero-code" || sb.Labels["e2e"] != "yes" || in == "" || !strings.HasPrefix(sb.Name, "DESTROYED_tether-"+in+"_") {
			t.Errorf("sandbox %s: name %q labels %v: want tether-<intent> with the runner's and tether's labels", sb.ID, sb.Name, sb.Labels)
		}
	}
	recorded := w.intents()
	if len(recorded) != 20 {
		t.Errorf("journal holds %d intents, want 20", len(recorded))
	}
	for _, in := range recorded {
		if in.State != intent.Gone {
			t.Errorf("intent %s (%s): %s (%s)", in.ID, in.Name, in.State, in.LastError)
		}
	}
	rep := mustReport(t, p.stderr.String())
	if rep.total != 20 || rep.left != 0 || rep.counts["gone"] != 20 {
		t.Errorf("report: %d intents, %d left, counts %v; want 20 gone", rep.total, rep.left, rep.counts)
	}
}

// A runner that hangs up on its create: it gives up hangupAfter after it
// sent it, while Daytona takes createLatency to answer. The hang-up must
// come after tether journaled and forwarded the create (else tether, seeing
// it, rightly sends nothing), and before the answer: on a loaded machine the
// first takes far more than the 100 ms these tests once allowed.
const (
	hangupAfter   = 2 * time.Second
	createLatency = 3 * hangupAfter
)

// TestProxyCreatesThatFailOrLoseTheirAnswer: a create that allocates and
// then fails (500), one answered 400 although the sandbox exists, and one
// whose runner hangs up before the answer: all end deleted.
func TestProxyCreatesThatFailOrLoseTheirAnswer(t *testing.T) {
	t.Parallel()
	w := newWorld(t, daytonatest.WithFaults(daytonatest.Faults{
		Latency: createLatency,
		Routes:  []string{daytonatest.RouteCreate},
	}))
	w.sim.Inject(daytonatest.RouteCreate, 1, daytonatest.Scripted{Status: 500, After: true})
	w.sim.Inject(daytonatest.RouteCreate, 1, daytonatest.Scripted{Status: 400, After: true})
	p := w.runZeroCode([]string{"--drain-timeout", drainTimeout}, "fail", "fail", "hangup:"+hangupAfter.String())
	out := p.ready()
	failed := out.of("failed")
	if len(failed) != 2 || failed[0].name != "500" || failed[1].name != "400" || len(out.of("hungup")) != 1 {
		t.Fatalf("runner: %+v", out.lines)
	}
	// The create the runner gave up on goes on: tether journals its id.
	testutil.Eventually(t, "the proxy journals the abandoned create's id", func() (bool, string) {
		live, err := w.liveIntents()
		if err != nil {
			return false, err.Error()
		}
		observed := 0
		for _, in := range live {
			if in.SandboxID != "" {
				observed++
			}
		}
		return len(live) == 3 && observed == 1, fmt.Sprintf("%d live, %d observed", len(live), observed)
	})
	if code := p.stop(syscall.SIGTERM); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("tether exited %d; stderr:\n%s", code, p.stderr)
	}
	ours := w.ours()
	if len(ours) != 3 {
		t.Fatalf("the simulator holds %d sandboxes of ours, want 3", len(ours))
	}
	for _, sb := range ours {
		w.assertDestroyed(sb.ID)
	}
	rep := mustReport(t, p.stderr.String())
	if rep.total != 3 || rep.left != 0 || rep.counts["gone"] != 3 {
		t.Errorf("report: %d intents, %d left, counts %v; want 3 gone", rep.total, rep.left, rep.counts)
	}
}

// TestProxyKeepsTheRunnersNameAndLabels: a runner that names its sandbox
// and labels it keeps both, plus tether's labels; the name is journaled,
// so the drain finds and verifies it.
func TestProxyKeepsTheRunnersNameAndLabels(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := w.runZeroCode([]string{"--drain-timeout", drainTimeout}, "named:agent-7")
	out := p.ready()
	c := out.of("created")
	if len(c) != 1 || c[0].name != "agent-7" {
		t.Fatalf("runner: %+v", out.lines)
	}
	sb, ok := w.sim.Sandbox(c[0].sandbox)
	if !ok {
		t.Fatal("no such sandbox")
	}
	in := sb.Labels[intent.LabelIntent]
	if sb.Name != "agent-7" || sb.Labels["job"] != "j-agent-7" || sb.Labels["runner"] != "zero-code" || sb.Labels["e2e"] != "yes" || sb.Labels[intent.LabelOwner] != w.owner || in == "" {
		t.Fatalf("sandbox %q labels %v", sb.Name, sb.Labels)
	}
	if code := p.stop(syscall.SIGTERM); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("tether exited %d; stderr:\n%s", code, p.stderr)
	}
	w.assertDestroyed(sb.ID)
	recorded := w.intents()
	if got := recorded[in]; got.Name != "agent-7" || got.State != intent.Gone {
		t.Errorf("intent %s: name %q state %s", in, got.Name, got.State)
	}
}

// TestProxySpoofedCreateIsJournaled: a runner copies the labels of an
// earlier sandbox, tether's owner and intent among them, into a new create
// with auto-stop off. Only a create that names a live intent with its name
// and every label may pass untouched, so this one is journaled as an intent
// of its own: it gets its own intent label and the backstop, and the drain
// deletes both sandboxes.
func TestProxySpoofedCreateIsJournaled(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := w.runZeroCode([]string{"--drain-timeout", drainTimeout}, "create:1", "spoof")
	out := p.ready()
	c := out.of("created")
	if len(c) != 2 {
		t.Fatalf("runner: %+v", out.lines)
	}
	first, _ := w.sim.Sandbox(c[0].sandbox)
	spoofed, _ := w.sim.Sandbox(c[1].sandbox)
	if spoofed.AutoStopInterval == 0 {
		t.Errorf("the spoofed create runs with auto-stop off")
	}
	if in := spoofed.Labels[intent.LabelIntent]; in == "" || in == first.Labels[intent.LabelIntent] {
		t.Errorf("spoofed sandbox labels %v: want an intent of its own (the first's is %s)", spoofed.Labels, first.Labels[intent.LabelIntent])
	}
	if code := p.stop(syscall.SIGTERM); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("tether exited %d; stderr:\n%s", code, p.stderr)
	}
	w.assertDestroyed(first.ID, spoofed.ID)
	gone := 0
	for _, in := range w.intents() {
		if in.State == intent.Gone {
			gone++
		}
	}
	if gone != 2 {
		t.Errorf("%d intents gone, want 2 (one per sandbox)", gone)
	}
}

// TestProxyOff: with --daytona-proxy=false the child gets the real
// DAYTONA_API_URL, and nothing is journaled for its creates.
func TestProxyOff(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := w.runZeroCode([]string{"--daytona-proxy=false"}, "url", "create:1", "exit")
	out := p.ready()
	if u := out.of("url"); len(u) != 1 || u[0].name != w.sim.URL {
		t.Fatalf("the runner's DAYTONA_API_URL is %+v, want %s", u, w.sim.URL)
	}
	if code := p.wait(); code != 0 {
		t.Fatalf("tether exited %d; stderr:\n%s", code, p.stderr)
	}
	if n := len(w.intents()); n != 0 {
		t.Errorf("%d intents journaled with the proxy off", n)
	}
	// Not ours: the sandbox stays, as it would without tether.
	sb, _ := w.sim.Sandbox(out.of("created")[0].sandbox)
	if sb.DeleteRequested {
		t.Error("a sandbox tether never knew of was deleted")
	}
}

// TestProxyRunnerOnAnotherAccount: a runner whose key is another account's
// than tether's. Its sandboxes are journaled under that account, reported
// as unresolved after the drain, and never touched with tether's key.
func TestProxyRunnerOnAnotherAccount(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := w.runZeroCode([]string{"--drain-timeout", drainTimeout}, "key:other-key", "create:2")
	out := p.ready()
	created := out.of("created")
	if len(created) != 2 {
		t.Fatalf("runner: %+v", out.lines)
	}
	if code := p.stop(syscall.SIGTERM); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("tether exited %d; stderr:\n%s", code, p.stderr)
	}
	for _, l := range created {
		sb, ok := w.sim.Sandbox(l.sandbox)
		if !ok || sb.Org != otherOrg || sb.DeleteRequested || sb.State != "started" {
			t.Errorf("the other account's sandbox %s: %+v; want it started and untouched", l.sandbox, sb)
		}
	}
	if n := w.sim.Calls()[daytonatest.RouteDelete]; n != 0 {
		t.Errorf("%d deletes", n)
	}
	if !strings.Contains(p.stderr.String(), "another Daytona account than tether's") {
		t.Errorf("the other account is not reported:\n%s", p.stderr)
	}
	if strings.Contains(p.stderr.String(), "other-key") {
		t.Errorf("the runner's key reached tether's logs:\n%s", p.stderr)
	}
	rep := mustReport(t, p.stderr.String())
	if rep.total != 2 || rep.left != 2 {
		t.Fatalf("report: %d intents, %d left; want both left live", rep.total, rep.left)
	}
	for id, it := range rep.unresolved {
		if !strings.Contains(it.why, "another provider account") {
			t.Errorf("intent %s left live for %q, want the account", id, it.why)
		}
	}
}

// TestProxyRunnerKilledMidCreate: the runner is SIGKILLed while its create
// is still on its way to Daytona. tether stops, but the create it forwarded
// goes on; the sandbox lands, and the drain finds it by name and deletes it.
func TestProxyRunnerKilledMidCreate(t *testing.T) {
	t.Parallel()
	w := newWorld(t, daytonatest.WithFaults(daytonatest.Faults{
		Latency: createLatency,
		Routes:  []string{daytonatest.RouteCreate},
	}))
	p := w.runZeroCode([]string{"--drain-timeout", drainTimeout}, "hangup:"+hangupAfter.String())
	out := p.ready()
	if len(out.of("hungup")) != 1 {
		t.Fatalf("runner: %+v", out.lines)
	}
	// The proxy journals before it forwards, and goes on after the hang-up:
	// on a loaded machine the create may reach Daytona after the runner
	// gave up on it, so wait for it instead of assuming it is there.
	testutil.Eventually(t, "the create reaches Daytona", func() (bool, string) {
		n := w.sim.Calls()[daytonatest.RouteCreate]
		return n == 1, fmt.Sprintf("%d creates reached Daytona, want 1", n)
	})
	if err := syscall.Kill(out.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(); code != 128+int(syscall.SIGKILL) {
		t.Fatalf("tether exited %d; stderr:\n%s", code, p.stderr)
	}
	ours := w.ours()
	if len(ours) != 1 {
		t.Fatalf("the simulator holds %d sandboxes of ours, want the one created after the kill", len(ours))
	}
	w.assertDestroyed(ours[0].ID)
	rep := mustReport(t, p.stderr.String())
	if rep.total != 1 || rep.left != 0 || rep.counts["gone"] != 1 {
		t.Errorf("report: %d intents, %d left, counts %v; want 1 gone", rep.total, rep.left, rep.counts)
	}
}
