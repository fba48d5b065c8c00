package e2e_test

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/testutil"

	"github.com/tether-run/tether/internal/crashpoint"
)

// The crash-point matrix: for every named crash point (internal/crashpoint)
// and every intake it lies on, tether (or the runner) built with
// -tags crashpoints dies there of SIGKILL; tether is restarted on the same
// journal, with a new runner or as `tether drain` alone; and the simulator's
// own record of every sandbox ever created and deleted is held to the four
// invariants (checkInvariants, checkAcked). The Daytona cases cover every
// point; the E2B ones (the runner creates in E2B, tether has both clouds'
// credentials) cover the intakes' and the runner's points, judged by
// e2btest's record (the drain's points under E2B are TestE2BCrashPoints').

// Settings of every tether the matrix runs.
const (
	// crashNeverCreated closes a declared name never seen after this long.
	// Every create of a case has landed or failed before the drain that
	// uses it starts (the processes that could create are dead, and the
	// simulator allocates a sandbox on arrival), so it can be short.
	crashNeverCreated = "2s"
)

// envCrashAll runs every case under both restarts (with and without a new
// runner); by default each case runs one of them, alternating.
const envCrashAll = "TETHER_CRASH_ALL"

// crashBinaries is tether and test/crashrunner built with -tags
// crashpoints, once per go test run.
func crashBinaries(t *testing.T) (tether, runner string) {
	t.Helper()
	return testutil.Build(t, testutil.TetherPkg, "crashpoints"), testutil.Build(t, testutil.Module+"/test/crashrunner", "crashpoints")
}

// Where a case's crash happens.
const (
	atIntake = "intake" // while the runner declares and creates
	atDrain  = "drain"  // in the drain that follows SIGTERM
	atReplay = "replay" // in the boot replay of a restart after a SIGKILL
	atRunner = "runner" // the runner dies; tether drains as it should
	// in `tether drain` (offline, from a host) of a journal a SIGKILL left
	atOffline = "offline"
)

type crashCase struct {
	intake string // socket, spool or proxy
	point  string // $TETHER_CRASHPOINT: NAME or NAME:N
	at     string
	cloud  string // where the runner creates: cloudDaytona or cloudE2B
}

// Clouds a crash runner creates in (its first argument).
const (
	cloudDaytona = "daytona"
	cloudE2B     = "e2b"
	cloudDocker  = "docker"
)

func (c crashCase) name() string {
	n := c.intake + "/" + c.at + "/" + strings.ReplaceAll(c.point, ":", "@")
	if c.cloud != cloudDaytona {
		n = c.cloud + "/" + n
	}
	return n
}

// crashCases is the matrix: each point on each intake whose path crosses it.
func crashCases() []crashCase {
	var cases []crashCase
	cloud := cloudDaytona
	add := func(intake, at string, points ...string) {
		for _, p := range points {
			cases = append(cases, crashCase{intake, p, at, cloud})
		}
	}
	add("socket", atIntake, crashpoint.APIBeforeJournal+":2", crashpoint.APIAfterJournal+":2", crashpoint.APIObserveAfterJournal+":2")
	add("spool", atIntake, crashpoint.SpoolBeforeJournal+":2", crashpoint.SpoolAfterJournal+":2")
	add("proxy", atIntake, crashpoint.ProxyBeforeJournal+":2", crashpoint.ProxyAfterJournal+":2", crashpoint.ProxyAfterUpstream+":2")
	for _, intake := range []string{"socket", "spool", "proxy"} {
		if intake != "proxy" { // the proxy journals every id it creates: no lookup
			add(intake, atDrain, crashpoint.ReaperAfterLookup)
		}
		add(intake, atDrain, crashpoint.ReaperBeforeDelete+":2", crashpoint.ReaperAfterDelete+":2", crashpoint.DrainResolved+":2")
		add(intake, atReplay, crashpoint.ReplayStarted, crashpoint.DrainResolved+":2")
		add(intake, atOffline, crashpoint.ReaperBeforeDelete+":2", crashpoint.ReaperAfterDelete+":2", crashpoint.DrainResolved+":2")
		if intake != "proxy" { // a zero-code runner has no ack and no observe of its own
			add(intake, atRunner, crashpoint.RunnerAfterAck+":2", crashpoint.RunnerAfterObserve+":2")
		}
		add(intake, atRunner, crashpoint.RunnerAfterCreate+":2")
	}
	// E2B at the intakes: the same points with E2B intents, through the
	// E2B proxy for the zero-code runner. A create the runner never
	// reported is found by its metadata, not by a name.
	cloud = cloudE2B
	add("socket", atIntake, crashpoint.APIBeforeJournal+":2", crashpoint.APIAfterJournal+":2", crashpoint.APIObserveAfterJournal+":2")
	add("spool", atIntake, crashpoint.SpoolBeforeJournal+":2", crashpoint.SpoolAfterJournal+":2")
	add("proxy", atIntake, crashpoint.ProxyBeforeJournal+":2", crashpoint.ProxyAfterJournal+":2", crashpoint.ProxyAfterUpstream+":2")
	add("socket", atRunner, crashpoint.RunnerAfterAck+":2", crashpoint.RunnerAfterObserve+":2")
	for _, intake := range []string{"socket", "spool", "proxy"} {
		add(intake, atRunner, crashpoint.RunnerAfterCreate+":2")
	}
	// Docker, on a simulated engine: the same points at the intakes and
	// the runner's, and the drain's where Docker's path is its own (a
	// create the proxy vouched for is deleted without a read, and a delete
	// is done when it answers; a socket intent's lost create is found by
	// its exact name).
	cloud = cloudDocker
	add("socket", atIntake, crashpoint.APIBeforeJournal+":2", crashpoint.APIAfterJournal+":2", crashpoint.APIObserveAfterJournal+":2")
	add("spool", atIntake, crashpoint.SpoolBeforeJournal+":2", crashpoint.SpoolAfterJournal+":2")
	add("proxy", atIntake, crashpoint.ProxyBeforeJournal+":2", crashpoint.ProxyAfterJournal+":2", crashpoint.ProxyAfterUpstream+":2")
	add("socket", atRunner, crashpoint.RunnerAfterAck+":2", crashpoint.RunnerAfterObserve+":2")
	for _, intake := range []string{"socket", "spool", "proxy"} {
		add(intake, atRunner, crashpoint.RunnerAfterCreate+":2")
	}
	add("socket", atDrain, crashpoint.ReaperAfterLookup)
	add("proxy", atDrain, crashpoint.ReaperBeforeDelete+":2", crashpoint.ReaperAfterDelete+":2", crashpoint.DrainResolved+":2")
	add("proxy", atReplay, crashpoint.ReplayStarted, crashpoint.DrainResolved+":2")
	add("proxy", atOffline, crashpoint.ReaperBeforeDelete+":2", crashpoint.ReaperAfterDelete+":2")
	return cases
}

// crashActions is what the first runner does: sandboxes reported, one
// created but never reported, one deleted by the runner itself, one
// declared and never created.
func crashActions(intake string) []string {
	if intake == "proxy" {
		return []string{"create", "create", "create", "delete"}
	}
	return []string{"create", "create", "unobserved", "create", "delete", "declare"}
}

// crashFlags are the flags of every `tether run` of the matrix: the
// proxy of the runner's cloud serves the proxy intake only.
func crashFlags(cloud, intake string) []string {
	f := []string{"--drain-timeout", drainTimeout, "--never-created-after", crashNeverCreated}
	switch {
	case cloud == cloudE2B:
		f = append(f, "--e2b-proxy="+strconv.FormatBool(intake == "proxy"))
	case cloud == cloudDocker:
		f = append(f, "--docker-proxy="+strconv.FormatBool(intake == "proxy"))
	case intake == "proxy":
		f = append(f, "--daytona-proxy=true")
	}
	return f
}

// runnerArgs is the crash runner's command line under `tether run`.
func runnerArgs(runnerBin, cloud, intake string, actions ...string) []string {
	return append([]string{"--", runnerBin, cloud, intake}, actions...)
}

// crashWorld is a world for cloud: for E2B, one with a simulated E2B API
// beside its Daytona, and tether given both clouds' credentials. rec is
// the record its invariants read.
func crashWorld(t *testing.T, cloud string) (w *world, rec simRecord) {
	switch cloud {
	case cloudE2B:
		ew := newE2BWorld(t)
		return ew.world, e2bRecord{ew}
	case cloudDocker:
		dw := newDockerWorld(t)
		return dw.world, dockerRecord{dw}
	}
	w = newWorld(t)
	return w, daytonaRecord{w}
}

func TestCrashPoints(t *testing.T) {
	t.Parallel()
	all := os.Getenv(envCrashAll) != ""
	for i, c := range crashCases() {
		for _, newRunner := range []bool{i%2 == 0, i%2 != 0} {
			how := "drain"
			if newRunner {
				how = "rerun"
			}
			t.Run(c.name()+"/"+how, func(t *testing.T) {
				t.Parallel()
				runCrashCase(t, c, newRunner)
			})
			if !all {
				break
			}
		}
	}
}

// runCrashCase crashes tether (or the runner) at c's point, restarts on the
// same journal, and holds the outcome to the invariants.
func runCrashCase(t *testing.T, c crashCase, newRunner bool) {
	w, rec := crashWorld(t, c.cloud)
	w.plantOtherAccount()
	tetherBin, runnerBin := crashBinaries(t)
	crashEnv := []string{crashpoint.Env + "=" + c.point}
	name, _, _ := strings.Cut(c.point, ":")
	flags := append(w.tetherArgs("run"), crashFlags(c.cloud, c.intake)...)
	run := func(env []string, actions ...string) *proc {
		args := append(slices.Clip(flags), runnerArgs(runnerBin, c.cloud, c.intake, actions...)...)
		return w.startBin(tetherBin, env, args...)
	}

	var out runnerOut
	var crashed *proc
	switch c.at {
	case atIntake, atRunner:
		crashed = run(crashEnv, crashActions(c.intake)...)
		out, _ = crashed.collect()
	case atDrain:
		crashed = run(crashEnv, crashActions(c.intake)...)
		var ready bool
		if out, ready = crashed.collect(); !ready {
			t.Fatalf("tether exited before the runner was ready: %v", crashed.stderr)
		}
		crashed.signal(syscall.SIGTERM)
	case atReplay, atOffline:
		first := run(nil, crashActions(c.intake)...)
		var ready bool
		if out, ready = first.collect(); !ready {
			t.Fatalf("tether exited before the runner was ready: %v", first.stderr)
		}
		// The replay needs intents in the journal: let tether take the
		// spool files first.
		testutil.Eventually(t, "tether takes the spool files", func() (bool, string) {
			left := w.spoolLeft()
			return len(left) == 0, fmt.Sprintf("%d files left", len(left))
		})
		if code := first.stop(syscall.SIGKILL); code != 137 {
			t.Fatalf("tether exited %d, want 137", code)
		}
		w.checkAcked(rec, c.intake, out)
		if c.at == atReplay {
			crashed = run(crashEnv) // a runner that holds: the replay works meanwhile
		} else {
			crashed = w.startBin(tetherBin, crashEnv, "drain", "--journal", w.journal,
				"--drain-timeout", drainTimeout, "--never-created-after", crashNeverCreated)
		}
	}
	code := crashed.wait()
	if code != 137 || !strings.Contains(crashed.stderr.String(), "crashpoint: "+name+" hit") {
		t.Fatalf("want a crash at %s (exit 137), got exit %d; stderr:\n%s", c.point, code, crashed.stderr)
	}
	w.checkAcked(rec, c.intake, out)

	// Restart on the same journal, with the release build.
	if newRunner {
		args := append(slices.Clip(flags), runnerArgs(runnerBin, c.cloud, c.intake, "create", "delete", "create", "exit")...)
		if code := w.startBin(bin.tether, nil, args...).wait(); code != 0 {
			t.Errorf("restarted tether exited %d, want the runner's 0", code)
		}
	} else {
		// `tether drain` alone: it takes the spool files tether never took
		// first, and no `tether run` follows to take what it left.
		code, stderr := w.runTether("drain", "--journal", w.journal, "--spool", w.spool, "--drain-timeout", drainTimeout, "--never-created-after", crashNeverCreated)
		if left := w.spoolLeft(); len(left) > 0 {
			t.Errorf("tether drain left %d spool files: %v", len(left), slices.Collect(maps.Keys(left)))
		}
		if code != 0 {
			t.Errorf("the restart exited %d, want 0; stderr:\n%s", code, stderr)
		}
	}
	n := w.checkInvariants(rec, true)
	t.Logf("%s: %d sandboxes of ours, %d intents, all resolved", c.point, n, len(w.intents()))
}

// plantOtherAccount plants, in another account of the same simulator, a
// sandbox carrying this journal's owner label and tether's naming: only the
// account tells it apart from ours.
func (w *world) plantOtherAccount() {
	id := newIntentID()
	w.plant(otherOrg, intent.NamePrefix+id, map[string]string{
		intent.LabelOwner: w.owner, intent.LabelIntent: id, "e2e": "yes", "runner": "crash",
	})
}

// collect reads the runner's lines until "ready" or the end of tether's
// output (tether and its runner died), within waitBound.
func (p *proc) collect() (out runnerOut, ready bool) {
	p.t.Helper()
	ready = p.ReadUntil("runner's ready (nor the end of tether's output)", out.add)
	return out, ready
}

// spoolLeft lists the spool files tether has not taken yet, by content.
func (w *world) spoolLeft() map[string]string {
	left := map[string]string{}
	entries, _ := os.ReadDir(w.spool)
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(w.spool, e.Name()))
		if err == nil {
			left[e.Name()] = string(b)
		}
	}
	return left
}

// spoolWaiting reports whether a spool file not taken yet names intent id.
func spoolWaiting(left map[string]string, id string) bool {
	for _, body := range left {
		if strings.Contains(body, `"id":"`+id+`"`) {
			return true
		}
	}
	return false
}

// checkAcked is invariant 4, right after the crash: every intent tether
// acknowledged is in the journal, and the journal opens. The socket's
// acknowledgement is its answer (201 for a declaration, 200 for an
// observe); the spool's is taking the file (a file not taken is still in
// the directory); the proxy's is the create's answer, which comes only
// after its intent was journaled (a runner that learns no name from it, as
// E2B's, is held to the name rec has for the sandbox).
func (w *world) checkAcked(rec simRecord, intake string, out runnerOut) {
	w.t.Helper()
	recorded := w.intents()
	byName := map[string]intent.Intent{}
	for _, in := range recorded {
		byName[in.Name] = in
	}
	left := w.spoolLeft()
	waiting := func(id string) bool { return spoolWaiting(left, id) }
	for _, l := range out.lines {
		switch {
		case l.how == "acked":
			if _, ok := recorded[l.intent]; !ok {
				w.t.Errorf("invariant 4: intent %s (%s) was acknowledged but is not in the journal", l.intent, l.name)
			}
		case l.how == "observed" && intake == "socket":
			if in := recorded[l.intent]; in.SandboxID != l.sandbox {
				w.t.Errorf("invariant 4: the observe of %s on intent %s was acknowledged, the journal has %q", l.sandbox, l.intent, in.SandboxID)
			}
		case l.how == "written" || (l.how == "observed" && intake == "spool"):
			if _, ok := recorded[l.intent]; !ok && !waiting(l.intent) {
				w.t.Errorf("invariant 4: the spool file of intent %s was taken but the intent is not in the journal", l.intent)
			}
		case l.how == "created" && intake == "proxy":
			if l.name == "-" {
				sb, _ := rec.sandbox(l.sandbox)
				l.name = sb.name
			}
			if _, ok := byName[l.name]; !ok {
				w.t.Errorf("invariant 4: the proxy answered the create of %s (%s), but no intent of that name is in the journal", l.name, l.sandbox)
			}
		}
	}
}

// checkInvariants holds rec, the simulators' record of every sandbox ever
// made, against the journal, once tether has exited:
//
//  1. no leak: every sandbox of ours (our account, our owner label or the
//     runner's) is deleted and its intent closed as gone or released (or
//     never-created, for one a failed delete hid before tether learned its
//     id); with final false (the soak, mid-way), one still alive may
//     instead be live in the journal (tether still knows of it and says
//     so);
//  2. no foreign deletion: nothing that is not ours was touched
//     (rec.checkForeign);
//  3. no false report: no intent closed as gone or never-created has a
//     sandbox the simulator still has alive;
//
// and it returns how many sandboxes of ours the simulators hold.
func (w *world) checkInvariants(rec simRecord, final bool) int {
	w.t.Helper()
	recorded := w.intents()
	if final {
		// The deletes the runner made itself (and released) finish; those
		// of tether were confirmed before it said gone, so they are not
		// waited for.
		testutil.Eventually(w.t, "the runner's deletes finish", func() (bool, string) {
			for _, sb := range rec.ours() {
				if sb.deleting && recorded[sb.intent].State == intent.Released {
					return false, fmt.Sprintf("sandbox %s is %s", sb.id, sb.state)
				}
			}
			return true, ""
		})
	}
	ours := rec.ours()
	left := w.spoolLeft()
	for _, sb := range ours {
		in, ok := recorded[sb.intent]
		switch {
		case !ok && !final && spoolWaiting(left, sb.intent):
			// Its spool file waits for the next tether run to take it.
		case !ok:
			w.t.Errorf("invariant 1: sandbox %s (%s, %s) carries our labels but no intent in the journal", sb.id, sb.name, sb.state)
		case !sb.ended && in.State == intent.Released && sb.deleting:
			// The runner deleted it and said so; the cloud is at it.
		case !sb.ended && (final || !in.Live()):
			w.t.Errorf("invariant 1: sandbox %s (%s) of intent %s is %s; the journal says %s (%s)", sb.id, sb.name, sb.intent, sb.state, in.State, in.LastError)
		case sb.ended && final && in.State == intent.NeverCreated && sb.unseen && in.SandboxID == "":
			// The runner deleted it before reporting it, and the failed
			// delete hid it from every answer: never-created is all
			// tether can see, and nothing leaks.
		case sb.ended && final && in.State != intent.Gone && in.State != intent.Released:
			w.t.Errorf("invariant 1: sandbox %s of intent %s is deleted but the journal never confirmed it: %s (%s)", sb.id, sb.intent, in.State, in.LastError)
		}
	}
	for _, in := range recorded {
		if in.State != intent.Gone && in.State != intent.NeverCreated {
			continue
		}
		for _, sb := range ours {
			if sb.intent == in.ID && !sb.ended {
				w.t.Errorf("invariant 3: intent %s is %s, but its sandbox %s is %s", in.ID, in.State, sb.id, sb.state)
			}
		}
		if in.SandboxID != "" {
			if sb, ok := rec.sandbox(in.SandboxID); ok && !sb.ended {
				w.t.Errorf("invariant 3: intent %s is %s, but sandbox %s is %s", in.ID, in.State, sb.id, sb.state)
			}
		}
	}
	if final {
		for _, in := range recorded {
			if in.Live() {
				w.t.Errorf("intent %s (%s) is still live after the last drain: %s, %s", in.ID, in.Name, in.State, in.LastError)
			}
		}
	}
	rec.checkForeign()
	return len(ours)
}

// TestCrashPointsCompaction: a journal left mostly free by pruning is
// compacted when tether next opens it; tether dies of SIGKILL just before
// the compacted copy is renamed over the journal, and just after. Either
// way the restart finds a whole journal (the old or the new) holding every
// live intent, and deletes every sandbox, by the simulator's record.
func TestCrashPointsCompaction(t *testing.T) {
	t.Parallel()
	for _, point := range []string{crashpoint.CompactBeforeRename, crashpoint.CompactAfterRename} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			tetherBin, _ := crashBinaries(t)
			live, before := w.journalWithHistory(3000, 6, true)
			crashed := w.startBin(tetherBin, []string{crashpoint.Env + "=" + point}, "drain", "--journal", w.journal, "--drain-timeout", drainTimeout)
			if code := crashed.wait(); code != 137 || !strings.Contains(crashed.stderr.String(), "crashpoint: "+point+" hit") {
				t.Fatalf("want a crash at %s (exit 137), got exit %d; stderr:\n%s", point, code, crashed.stderr)
			}
			for _, in := range live {
				if sb, ok := w.sim.Sandbox(in.SandboxID); !ok || sb.DeleteRequested {
					t.Fatalf("sandbox %s touched before the crash: %+v", in.SandboxID, sb)
				}
			}
			ro := w.readIntents()
			if len(ro) != len(live) {
				t.Fatalf("after the crash the journal holds %d intents, want the %d live", len(ro), len(live))
			}
			for _, in := range ro {
				if want, ok := live[in.ID]; !ok || in.State != intent.Observed || in.SandboxID != want.SandboxID {
					t.Fatalf("after the crash: %+v", in)
				}
			}

			code, stderr := w.runTether("drain", "--journal", w.journal, "--drain-timeout", drainTimeout)
			if code != 0 {
				t.Fatalf("the restart exited %d; stderr:\n%s", code, stderr)
			}
			for _, in := range live {
				w.assertDestroyed(in.SandboxID)
			}
			w.assertJournal(intent.Gone, slices.Collect(maps.Keys(live))...)
			if _, err := os.Lstat(w.journal + ".compact"); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the compaction's copy is left after the restart: %v", err)
			}
			fi, _ := os.Stat(w.journal)
			t.Logf("%s: journal %d KiB before, %d KiB after the restart", point, before>>10, fi.Size()>>10)
			if fi.Size()*4 > before {
				t.Errorf("journal of %d bytes after the restart, %d before: not compacted", fi.Size(), before)
			}
		})
	}
}
