package e2e_test

import (
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/testutil"
)

// TestChildEndDrains: however the runner ends — a clean exit, a crash, a
// SIGKILL — every sandbox it created is deleted and confirmed gone, even
// the one whose id it never reported, and tether exits with its code.
func TestChildEndDrains(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		runner []string // how the runner ends, beyond the common flags
		kill   bool     // the test SIGKILLs the runner once it is ready
		want   int
	}{
		{name: "exit0", runner: []string{"--exit", "0"}, want: 0},
		{name: "exit1", runner: []string{"--exit", "1"}, want: 1},
		{name: "sigkill", kill: true, want: 128 + int(syscall.SIGKILL)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			p := w.run([]string{"--drain-timeout", drainTimeout},
				append([]string{"--sandboxes", "5", "--unobserved", "1", "--released", "1", "--print-pid"}, tc.runner...)...)
			out := p.ready()
			if tc.kill {
				if out.pid <= 0 {
					t.Fatal("the runner printed no pid")
				}
				if err := syscall.Kill(out.pid, syscall.SIGKILL); err != nil {
					t.Fatalf("kill the runner: %v", err)
				}
			}
			if code := p.wait(); code != tc.want {
				t.Fatalf("tether exited %d, want the child's %d; stderr:\n%s", code, tc.want, p.stderr)
			}

			left := out.of("created", "unobserved")
			if len(left) != 4 {
				t.Fatalf("runner created %d sandboxes it did not clean up, want 4: %+v", len(left), out.lines)
			}
			w.assertDestroyed(ids(left, sandboxOf)...)
			w.assertJournal(intent.Gone, ids(left, intentOf)...)
			released := out.of("released")
			if len(released) != 1 {
				t.Fatalf("runner released %d, want 1: %+v", len(released), out.lines)
			}
			w.eventuallyDestroyed(ids(released, sandboxOf)...) // by the runner itself, asynchronously
			w.assertJournal(intent.Released, ids(released, intentOf)...)

			rep := mustReport(t, p.stderr.String())
			if rep.total != 4 || rep.left != 0 || rep.counts["gone"] != 4 || rep.counts["unresolved"] != 0 {
				t.Errorf("report: %d intents, %d left, counts %v; want 4 intents, all gone", rep.total, rep.left, rep.counts)
			}
		})
	}
}

// TestSigtermDrainsFifty: docker stop (SIGTERM to tether) with 50 live
// sandboxes: the signal reaches the runner, which dies of it, and every
// sandbox is confirmed gone before the drain deadline; tether exits with
// the child's status, 143. It runs tether's default --grace and
// --drain-timeout, the ones a `docker stop` meets: the drain takes a few
// hundred milliseconds here, far inside the default 5 s deadline.
func TestSigtermDrainsFifty(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := w.run(nil, "--sandboxes", "50")
	out := p.ready()
	created := out.of("created")
	if len(created) != 50 {
		t.Fatalf("runner created %d sandboxes, want 50", len(created))
	}
	// A twin of one of ours, with the very same name and labels, in
	// another account that shares the simulator.
	twin := w.intentOf(created[0].intent)
	w.plantTwin(twin.Name, twin.Labels)

	if code := p.stop(syscall.SIGTERM); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("tether exited %d, want 143; stderr:\n%s", code, p.stderr)
	}
	w.assertDestroyed(ids(created, sandboxOf)...)
	w.assertJournal(intent.Gone, ids(created, intentOf)...)
	rep := mustReport(t, p.stderr.String())
	if rep.total != 50 || rep.left != 0 || rep.counts["gone"] != 50 {
		t.Errorf("report: %d intents, %d left, counts %v; want 50 gone", rep.total, rep.left, rep.counts)
	}
	t.Logf("drained 50 sandboxes in %s", rep.elapsed)
}

// TestOnUnresolved: an intent whose sandbox never appeared stays live after
// the drain; with --on-unresolved=exit-code a child that exited 0 makes
// tether exit 3, and the report names the intent either way.
func TestOnUnresolved(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode string
		want int
	}{
		{"exit-code", 3},
		{"ignore", 0},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			// The drain cannot end the never-created intent before its
			// horizon, so it runs to its deadline.
			p := w.run([]string{"--drain-timeout", unresolvedDrain, "--on-unresolved", tc.mode},
				"--sandboxes", "2", "--declared", "1", "--exit", "0")
			out := p.ready()
			if code := p.wait(); code != tc.want {
				t.Fatalf("tether exited %d, want %d; stderr:\n%s", code, tc.want, p.stderr)
			}
			created, declared := out.of("created"), out.of("declared")
			if len(created) != 2 || len(declared) != 1 {
				t.Fatalf("runner: %+v", out.lines)
			}
			w.assertDestroyed(ids(created, sandboxOf)...)
			w.assertJournal(intent.Gone, ids(created, intentOf)...)
			w.assertJournal(intent.Pending, declared[0].intent)

			rep := mustReport(t, p.stderr.String())
			if rep.total != 3 || rep.left != 1 || rep.counts["gone"] != 2 {
				t.Errorf("report: %d intents, %d left, counts %v; want 3, 2 gone, 1 left", rep.total, rep.left, rep.counts)
			}
			it, ok := rep.unresolved[declared[0].intent]
			if !ok || len(rep.unresolved) != 1 {
				t.Fatalf("report's unresolved %v, want exactly %s", rep.unresolved, declared[0].intent)
			}
			if it.name != declared[0].name || it.sandbox != "-" || it.state != "pending" || it.why == "" {
				t.Errorf("report line %+v, want name %s, no sandbox, pending, with a reason", it, declared[0].name)
			}
		})
	}
}

// TestRepeatedSignalDuringDrain: docker stop sent twice, or a Ctrl-C after
// it, neither restarts nor aborts a running drain. One sandbox is held in
// destroying so that the drain is provably still running when each signal
// arrives; once it is let go, the one drain finishes and reports once.
func TestRepeatedSignalDuringDrain(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := w.run([]string{"--drain-timeout", drainTimeout}, "--sandboxes", "5")
	out := p.ready()
	created := out.of("created")
	if len(created) != 5 {
		t.Fatalf("runner: %+v", out.lines)
	}
	held := created[0].sandbox
	if err := w.sim.Hold(held, "destroying", 0); err != nil {
		t.Fatal(err)
	}
	p.signal(syscall.SIGTERM)
	testutil.Eventually(t, "the drain starts", func() (bool, string) {
		return strings.Contains(p.stderr.String(), "drain: resolving every live intent"), "no drain in the log"
	})
	const caught = "signal received after the child ended; finishing the drain"
	for i, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGTERM} {
		p.signal(sig)
		testutil.Eventually(t, "tether notes the signal and drains on", func() (bool, string) {
			n := strings.Count(p.stderr.String(), caught)
			return n == i+1, fmt.Sprintf("%d signals noted", n)
		})
	}
	// The other four are done while the held one still blocks nothing but itself.
	testutil.Eventually(t, "the other sandboxes go while one hangs", func() (bool, string) {
		for _, l := range created[1:] {
			if sb, _ := w.sim.Sandbox(l.sandbox); sb.State != "destroyed" {
				return false, fmt.Sprintf("sandbox %s is %s", l.sandbox, sb.State)
			}
		}
		return true, ""
	})
	if err := w.sim.Release(held); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("tether exited %d, want 143; stderr:\n%s", code, p.stderr)
	}
	stderr := p.stderr.String()
	if n := strings.Count(stderr, "drain: resolving every live intent"); n != 1 {
		t.Errorf("the drain ran %d times, want once", n)
	}
	rep := mustReport(t, stderr)
	if rep.total != 5 || rep.left != 0 || rep.counts["gone"] != 5 {
		t.Errorf("report: %d intents, %d left, counts %v; want 5 gone", rep.total, rep.left, rep.counts)
	}
	w.assertDestroyed(ids(created[1:], sandboxOf)...)
	if sb, _ := w.sim.Sandbox(held); sb.State != "destroyed" {
		t.Errorf("held sandbox %s is %s", held, sb.State)
	}
	w.assertJournal(intent.Gone, ids(created, intentOf)...)
}

// TestRunnerCleansUpInGrace: a runner with its own shutdown handler gets
// tether's grace period to use it: the socket API still serves while the
// child is alive, so it deletes and releases its sandboxes itself, and the
// drain finds nothing left to do. tether exits with the child's 0.
func TestRunnerCleansUpInGrace(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := w.run([]string{"--drain-timeout", drainTimeout, "--on-unresolved", "exit-code"}, "--sandboxes", "4", "--cleanup-on-signal")
	created := p.ready().of("created")
	if len(created) != 4 {
		t.Fatalf("runner created %d, want 4", len(created))
	}
	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("tether exited %d, want the child's 0; stderr:\n%s", code, p.stderr)
	}
	// Released, not gone: the runner did the work, not tether's drain,
	// which had nothing left to report.
	w.assertJournal(intent.Released, ids(created, intentOf)...)
	if rep, ok := parseReport(p.stderr.String()); ok {
		t.Errorf("the drain had work left after the runner released everything: %+v", rep)
	}
	// The runner's deletes are asynchronous, as on Daytona.
	w.eventuallyDestroyed(ids(created, sandboxOf)...)
}
