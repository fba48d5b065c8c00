package e2e_test

import (
	"strings"
	"syscall"
	"testing"
)

// TestRunOwnOperatorCommand: `tether run -- tether status` (what `docker
// run IMAGE tether status` runs under the image's ENTRYPOINT) is the
// operator's command run in run's place, not a runner: on a journal a
// killed tether left with live intents it prints them, and every sandbox is
// still alive by the simulator's record (a supervising run would have
// replayed and drained them); `tether run -- tether drain` drains them, as
// `tether drain` alone does, instead of finding the journal held by the
// run around it.
func TestRunOwnOperatorCommand(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := w.run(nil, "--sandboxes", "3")
	out := p.ready()
	live := out.of("created")
	if len(live) != 3 {
		t.Fatalf("runner: %+v", out.lines)
	}
	if code := p.stop(syscall.SIGKILL); code != 128+int(syscall.SIGKILL) {
		t.Fatalf("tether exited %d, want 137", code)
	}

	st := w.start("run", "--journal", w.journal, "--socket", w.socket, "--spool", w.spool, "--", bin.tether, "status", "--journal", w.journal)
	if code := st.wait(); code != 0 {
		t.Fatalf("tether run -- tether status: exit %d; stderr:\n%s", code, st.stderr)
	}
	stdout := st.Stdout()
	if !strings.Contains(stdout, "3 live (3 observed)") {
		t.Errorf("tether run -- tether status does not show the 3 live intents:\n%s", stdout)
	}
	for _, c := range live {
		if !strings.Contains(stdout, c.sandbox) {
			t.Errorf("status does not list sandbox %s:\n%s", c.sandbox, stdout)
		}
		if sb, _ := w.sim.Sandbox(c.sandbox); sb.DeleteRequested || sb.State != "started" {
			t.Errorf("sandbox %s after tether run -- tether status: state %s, delete requested %v; want started, untouched", c.sandbox, sb.State, sb.DeleteRequested)
		}
	}
	if s := st.stderr.String(); strings.Contains(s, "replay") || strings.Contains(s, "drain") {
		t.Errorf("tether run -- tether status replayed or drained:\n%s", s)
	}

	dr := w.start("run", "--journal", w.journal, "--", bin.tether, "drain", "--journal", w.journal, "--spool", w.spool)
	if code := dr.wait(); code != 0 {
		t.Fatalf("tether run -- tether drain: exit %d, want 0; stderr:\n%s", code, dr.stderr)
	}
	if rep := mustReport(t, dr.stderr.String()); rep.total != 3 || rep.counts["gone"] != 3 {
		t.Errorf("report: %d intents, counts %v; want the 3 gone", rep.total, rep.counts)
	}
	w.assertDestroyed(ids(live, sandboxOf)...)
}
