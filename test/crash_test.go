package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/testutil"

	"github.com/tether-run/tether/intentapi"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// intentNew runs `tether intent new` against the running tether, as a
// shell runner would, and returns the intent it printed.
func (w *world) intentNew(labels ...string) intentapi.Intent {
	w.t.Helper()
	args := []string{"intent", "new", "--socket", w.socket}
	for _, l := range labels {
		args = append(args, "--label", l)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin.tether, args...)
	cmd.Env = w.env
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		w.t.Fatalf("tether intent new: %v\n%s", err, stderr)
	}
	var in intentapi.Intent
	if err := json.Unmarshal(out, &in); err != nil {
		w.t.Fatalf("tether intent new printed %q: %v", out, err)
	}
	return in
}

// dead reports whether process pid has exited (gone, or a zombie no one
// has reaped yet).
func dead(pid int) (bool, string) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true, ""
	}
	// The state follows the command name in parentheses.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		st := s[i+2]
		return st == 'Z' || st == 'X', fmt.Sprintf("process %d in state %c", pid, st)
	}
	return false, "unreadable stat: " + s
}

func sortedIDs(ins []intentapi.Intent) []string {
	out := make([]string, 0, len(ins))
	for _, in := range ins {
		out = append(out, in.ID)
	}
	sort.Strings(out)
	return out
}

// TestCrashReplay: tether is SIGKILLed with 20 live intents — 10 observed,
// 4 created but never reported, 6 declared with `tether intent new` whose
// creates land only after the crash (3), later still (2), or never with our
// labels (an impostor takes the name). Restarted on the same journal, the
// replay deletes every sandbox that exists, without making the new runner
// wait; it keeps the never-seen ones live until they appear, then deletes
// them; and it touches nothing that is not ours.
func TestCrashReplay(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p1 := w.run([]string{"--drain-timeout", drainTimeout}, "--sandboxes", "14", "--unobserved", "4", "--print-pid")
	out := p1.ready()
	created, unobserved := out.of("created"), out.of("unobserved")
	if len(created) != 10 || len(unobserved) != 4 {
		t.Fatalf("runner: %+v", out.lines)
	}
	var cli []intentapi.Intent
	for range 6 {
		cli = append(cli, w.intentNew("run=e2e", "via=cli"))
	}
	late, unseen, impostor := cli[:3], cli[3:5], cli[5]
	// Twins in another account, with the exact names and labels of an
	// observed intent and of a never-seen one.
	twin := w.intentOf(created[0].intent)
	w.plantTwin(twin.Name, twin.Labels)
	w.plantTwin(unseen[0].Name, unseen[0].Labels)

	if code := p1.stop(syscall.SIGKILL); code != 128+int(syscall.SIGKILL) {
		t.Fatalf("tether exited %d, want 137", code)
	}
	// The runner dies with tether (parent-death signal): nothing of the
	// first run cleans anything up.
	testutil.Eventually(t, "the runner dies with tether", func() (bool, string) { return dead(out.pid) })

	recorded := w.intents()
	var live, observed int
	for _, in := range recorded {
		if in.Live() {
			live++
		}
		if in.State == intent.Observed {
			observed++
		}
	}
	if live != 20 || observed != 10 {
		t.Fatalf("journal after the crash: %d live (%d observed), want 20 (10)", live, observed)
	}
	for _, l := range append(created, unobserved...) {
		if sb, _ := w.sim.Sandbox(l.sandbox); sb.State != "started" {
			t.Fatalf("sandbox %s is %s after the crash, want started (leaked)", l.sandbox, sb.State)
		}
	}
	var lateSandboxes []string
	for _, in := range late {
		lateSandboxes = append(lateSandboxes, w.plantOurs(recorded[in.ID].Name, recorded[in.ID].Labels).ID)
	}

	p2 := w.run([]string{"--drain-timeout", drainTimeout}, "--sandboxes", "0")
	p2.ready() // the runner starts while the replay works

	exist := append(ids(append(created, unobserved...), sandboxOf), lateSandboxes...)
	waiting := []string{unseen[0].ID, unseen[1].ID, impostor.ID}
	sort.Strings(waiting)
	testutil.Eventually(t, "the replay deletes every sandbox that exists and waits for the others", func() (bool, string) {
		for _, id := range exist {
			if sb, _ := w.sim.Sandbox(id); sb.State != "destroyed" {
				return false, fmt.Sprintf("sandbox %s is %s", id, sb.State)
			}
		}
		ins, err := w.liveIntents()
		if err != nil {
			return false, err.Error()
		}
		got := sortedIDs(ins)
		return strings.Join(got, ",") == strings.Join(waiting, ","), fmt.Sprintf("live %v, want %v", got, waiting)
	})
	ins, err := w.liveIntents()
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range ins {
		if in.State != intent.Pending || in.SandboxID != "" {
			t.Errorf("never-seen intent %s: state %s, sandbox %q; want pending with none", in.ID, in.State, in.SandboxID)
		}
	}

	// Now the stragglers land: two with our labels, and a sandbox of
	// somebody else that took the third name.
	var stragglers []string
	for _, in := range unseen {
		stragglers = append(stragglers, w.plantOurs(recorded[in.ID].Name, recorded[in.ID].Labels).ID)
	}
	labels := map[string]string{}
	for k, v := range recorded[impostor.ID].Labels {
		labels[k] = v
	}
	labels[intent.LabelOwner] = "somebody-else"
	w.plant(daytonatest.DefaultOrg, impostor.Name, labels)

	testutil.Eventually(t, "the replay resolves the stragglers", func() (bool, string) {
		ins, err := w.liveIntents()
		if err != nil {
			return false, err.Error()
		}
		return len(ins) == 0, fmt.Sprintf("%d live intents", len(ins))
	})
	if code := p2.stop(syscall.SIGTERM); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("restarted tether exited %d, want 143; stderr:\n%s", code, p2.stderr)
	}

	w.assertDestroyed(append(exist, stragglers...)...)
	gone := ids(append(created, unobserved...), intentOf)
	for _, in := range append(late, unseen...) {
		gone = append(gone, in.ID)
	}
	w.assertJournal(intent.Gone, gone...)
	w.assertJournal(intent.Foreign, impostor.ID)
	if !strings.Contains(p2.stderr.String(), "replay: done") && !strings.Contains(p2.stderr.String(), "replay: resolving") {
		t.Errorf("the restarted tether did not log its replay:\n%s", p2.stderr)
	}
}

// TestOfflineDrain: after tether was SIGKILLed, `tether drain --journal`
// from the host resolves what it left. A never-created intent keeps it
// from finishing (exit 3, named in the report) until its sandbox lands;
// the next drain deletes that one and exits 0.
func TestOfflineDrain(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := w.run([]string{"--drain-timeout", drainTimeout}, "--sandboxes", "6", "--unobserved", "2", "--declared", "1")
	out := p.ready()
	left, declared := out.of("created", "unobserved"), out.of("declared")
	if len(left) != 6 || len(declared) != 1 {
		t.Fatalf("runner: %+v", out.lines)
	}
	pending := w.intentOf(declared[0].intent)
	w.plantTwin(pending.Name, pending.Labels) // the same name in another account must not count
	if code := p.stop(syscall.SIGKILL); code != 128+int(syscall.SIGKILL) {
		t.Fatalf("tether exited %d, want 137", code)
	}

	// Its default deadline (2m) is far off, and the one intent left can
	// only close as never-created in 30m: once the others are gone the
	// drain stops early, saying what it waited for and why it stops.
	start := time.Now()
	code, stderr := w.runTether("drain", "--journal", w.journal)
	if code != 3 {
		t.Fatalf("tether drain exited %d, want 3 (one never-created intent); stderr:\n%s", code, stderr)
	}
	if took := time.Since(start); took > time.Minute {
		t.Errorf("tether drain took %s: it did not stop early", took)
	}
	// It names the setting that decides when, and what to do.
	for _, want := range []string{"1 intent waits for its sandbox name to appear", "(--never-created-after 30m0s after its declaration)",
		"so the drain stops in", "stopping early", "stopped early: ", "To close it: run tether drain again after ",
		"now, with a --never-created-after shorter than its age"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("tether drain does not say %q:\n%s", want, stderr)
		}
	}
	rep := mustReport(t, stderr)
	if rep.total != 7 || rep.left != 1 || rep.counts["gone"] != 6 {
		t.Errorf("report: %d intents, %d left, counts %v; want 7, 6 gone, 1 left", rep.total, rep.left, rep.counts)
	}
	it, ok := rep.unresolved[pending.ID]
	if !ok || len(rep.unresolved) != 1 || it.name != pending.Name || it.state != "pending" || it.sandbox != "-" {
		t.Errorf("report's unresolved %v, want only %s (%s), pending, no sandbox", rep.unresolved, pending.ID, pending.Name)
	}
	w.assertDestroyed(ids(left, sandboxOf)...)
	w.assertJournal(intent.Gone, ids(left, intentOf)...)
	w.assertJournal(intent.Pending, pending.ID)

	// Its create lands at last; the next cron run of the drain takes it.
	sb := w.plantOurs(pending.Name, pending.Labels)
	code, stderr = w.runTether("drain", "--journal", w.journal)
	if code != 0 {
		t.Fatalf("tether drain exited %d, want 0; stderr:\n%s", code, stderr)
	}
	rep = mustReport(t, stderr)
	if !strings.Contains(stderr, "tether: drain: 1 intent in ") {
		t.Errorf("the report does not say \"1 intent\":\n%s", stderr)
	}
	if rep.total != 1 || rep.left != 0 || rep.counts["gone"] != 1 {
		t.Errorf("report: %d intents, %d left, counts %v; want the 1 gone", rep.total, rep.left, rep.counts)
	}
	w.assertDestroyed(sb.ID)
	w.assertJournal(intent.Gone, pending.ID)

	// Nothing left: a third run has nothing to do, and says so.
	if code, stderr := w.runTether("drain", "--journal", w.journal); code != 0 || !strings.Contains(stderr, "tether: drain: no live intent in "+w.journal+"; nothing to do, 0 left live") {
		t.Fatalf("tether drain of a journal with nothing live exited %d, want 0 with a summary; stderr:\n%s", code, stderr)
	}
}

// TestDrainRefusesMissingJournal: a cron pointed at the wrong path must not
// create an empty journal and call that a success.
func TestDrainRefusesMissingJournal(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	missing := w.journal + ".missing"
	code, stderr := w.runTether("drain", "--journal", missing)
	if code != 125 {
		t.Fatalf("tether drain of a missing journal exited %d, want 125; stderr:\n%s", code, stderr)
	}
	if _, err := os.Stat(missing); err == nil {
		t.Errorf("tether drain created %s", missing)
	}
}
