package e2e_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-run/tether/internal/intake/spooldir"
)

// spoolFilesAtTerm is how many spool files the runner renames into the
// spool directory on SIGTERM.
const spoolFilesAtTerm = 10000

// TestShutdownIsBoundedByGraceAndDrain: oklog/run calls the interrupts one
// after another, before the drain. The intent API's interrupt used to wait
// for its connections (a hung client held it 2 s) and the spool intake's
// last scan ran before the drain, outside its deadline (up to 5 s), so
// docker stop's SIGTERM could meet a tether still busy past --grace +
// --drain-timeout. Now the interrupts only signal, and the wait for the
// API's last requests and the last scan is part of the drain, under its
// deadline.
//
// The worst case, with tether's default --grace and --drain-timeout: a
// client hung on the socket with half a request, a runner that renames
// 10,000 spool files in when it gets SIGTERM and dies at once (so most are
// left to the last scan), and a drain that cannot finish in time (10,002
// live intents). The time from SIGTERM to exit is logged (docs/benchmarks.md
// has the figures), not asserted: on a loaded machine the reaper's return
// after its deadline and the report take what the scheduler gives them.
// What is asserted is what the code promises, read from tether's own log:
// one deadline, made when the child is gone, is the one the reaper works
// under (its own record of the time left agrees with it); the drain's
// deadline is running before the last scan is done; the drain is cut short
// by it (the two real sandboxes gone, the 10,000 spool intents left live,
// none closed); and no spool file is lost —
// each is either journaled or still in the spool directory for the next
// start. The only bound on the wall clock catches a hang: grace plus drain
// deadline plus a minute.
func TestShutdownIsBoundedByGraceAndDrain(t *testing.T) {
	t.Parallel()
	computes(t)
	w := newWorld(t)
	stage := filepath.Join(w.dir, "stage")
	if err := os.Mkdir(stage, 0o700); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < spoolFilesAtTerm; i++ {
		body := fmt.Sprintf(`{"op":"intent","id":"f%05d","labels":{"run":"e2e"},"on_drain":"delete"}`, i)
		if err := os.WriteFile(filepath.Join(stage, fmt.Sprintf("f%05d.json", i)), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	script := `"$0" "$@" || exit 1
exec 2>/dev/null
trap 'mv "$STAGE"/* "$TETHER_SPOOL"/; kill -KILL $$' TERM
echo waiting
while :; do sleep 0.1; done`
	args := append(w.tetherArgs("run"), "--log-level", "debug",
		"--", "/bin/sh", "-c", script, bin.runner, "--label", "e2e", "--sandboxes", "2", "--exit", "0")
	w.env = append(w.env, "STAGE="+stage)
	p := w.start(args...)
	out := p.ready()
	created := out.of("created")
	if len(created) != 2 {
		t.Fatalf("runner created %d sandboxes, want 2: %+v", len(created), out.lines)
	}
	p.wantLine("waiting")

	hung, err := net.Dial("unix", w.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer hung.Close()
	if _, err := hung.Write([]byte("POST /v1/intents HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{")); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	p.signal(syscall.SIGTERM)
	code := p.wait()
	took := time.Since(start)
	t.Logf("SIGTERM to exit: %s (--grace 3s, of which the runner took little; --drain-timeout 5s from the child's exit)", took.Round(time.Millisecond))
	if hang := 3*time.Second + 5*time.Second + time.Minute; took > hang {
		t.Errorf("SIGTERM to exit took %s, more than %s: a hang, not a slow machine", took.Round(time.Millisecond), hang)
	}
	if code != 128+int(syscall.SIGKILL) {
		t.Fatalf("tether exited %d, want 137 (the runner kills itself); stderr:\n%s", code, p.stderr)
	}

	stderr := p.stderr.String()
	for _, line := range strings.Split(stderr, "\n") { // the timeline, for go test -v
		for _, m := range []string{"stopping the child", "child exited", "drain", "spool: last scan", "intent API: closed", "tether: "} {
			if strings.Contains(line, m) && !strings.Contains(line, "daytona call") {
				t.Log(line)
				break
			}
		}
	}
	at := func(msg string) int {
		i := strings.Index(stderr, `msg="`+msg)
		if i < 0 {
			t.Fatalf("tether never logged %q; stderr:\n%s", msg, stderr)
		}
		return i
	}
	drain := at("drain: the child is gone")
	// The intent API's close is not ordered against the drain's start: the
	// hung client's half request is owed nothing (socket.Server.Close), so
	// the API closes at once, and its line and the drain's come in either
	// order (1 of 3 runs logged the API's first). Only that it closed is
	// read here; the last scan of the spool's files is what takes time.
	at("intent API: closed")
	if scan := at("spool: last scan done"); scan < drain {
		t.Errorf("the spool intake's last scan finished before the drain's deadline started: the interrupt waited for it")
	}

	// One deadline: the one made when the child is gone (--drain-timeout
	// from then) is the one the reaper works under. Each is read from the
	// line tether logs beside it: the time of the line, and the deadline's
	// length (made there) or the time left (the reaper's record). They agree
	// but for the moments between a statement and its log line; a deadline
	// made anew, or started late, would be off by the time the wait for the
	// intakes took (about half a second here).
	made := logLine(t, stderr, "drain: the child is gone")
	reaperLine := logLine(t, stderr, "drain: resolving every live intent")
	deadline := made.at.Add(made.duration(t, "deadline"))
	timeLeft := reaperLine.duration(t, "deadline")
	if timeLeft <= 0 || timeLeft > 5*time.Second {
		t.Errorf("the reaper had %s left of the drain's deadline, want some of the 5 s", timeLeft)
	}
	if off := reaperLine.at.Add(timeLeft).Sub(deadline); off < -200*time.Millisecond || off > 200*time.Millisecond {
		t.Errorf("the reaper's deadline is %s off the one made when the child was gone: another deadline", off)
	}
	finished := logLine(t, stderr, "drain finished")
	t.Logf("the drain's deadline %s after the child's exit; the reaper started with %s left and finished %s after the deadline",
		made.duration(t, "deadline"), timeLeft, finished.at.Sub(deadline).Round(time.Millisecond))

	// No spool file is lost: journaled, or left for the next start. On a
	// loaded machine the grace can end before the runner's mv has moved
	// them all (tether then kills its process group): those never reached
	// the spool and are still in the stage directory, each file in exactly
	// one of the three places.
	journaled := 0
	for _, in := range w.intents() {
		if strings.HasPrefix(in.ID, "f") { // the spool file's id is the intent id
			journaled++
		}
	}
	left, err := filepath.Glob(filepath.Join(w.spool, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	rejected, _ := filepath.Glob(filepath.Join(w.spool, spooldir.RejectedDir, "*"))
	unwritten, err := filepath.Glob(filepath.Join(stage, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("spool files: %d journaled, %d left for the next start, %d never moved in by the runner", journaled, len(left), len(unwritten))
	// Cut short by the deadline: every intent the drain had was resolved
	// (the runner's sandboxes, gone) or left live, none closed for want of
	// time, and every spool file's intent among those left live.
	count := func(key string) int {
		n, err := strconv.Atoi(finished.attr(t, key))
		if err != nil {
			t.Fatalf("drain finished: %s: %v", key, err)
		}
		return n
	}
	if n, gone, unresolved := count("intents"), count("gone"), count("unresolved"); gone+unresolved != n || unresolved < journaled || gone > len(created) {
		t.Errorf("drain finished: %s; want the %d spool intents journaled left live, the rest of the %d gone or left live, nothing else", finished.text, journaled, n)
	}
	if journaled+len(left)+len(unwritten) != spoolFilesAtTerm || len(rejected) != 0 {
		t.Errorf("%d journaled + %d left in the spool + %d never moved in + %d rejected, want %d in the first three", journaled, len(left), len(unwritten), len(rejected), spoolFilesAtTerm)
	}
	if len(unwritten) == spoolFilesAtTerm {
		t.Errorf("the runner moved no spool file in before it was killed: nothing was left to the last scan")
	}
	// Each of the runner's sandboxes is deleted, or its intent is still
	// live for the next start: never closed while it exists.
	all := w.intents()
	for _, c := range created {
		sb, _ := w.sim.Sandbox(c.sandbox)
		if in := all[c.intent]; sb.State != "destroyed" && !in.Live() {
			t.Errorf("sandbox %s is %s but its intent is %s", c.sandbox, sb.State, in.State)
		}
	}
}

// logged is one line of tether's log (the text handler's key=value form).
type logged struct {
	text string
	at   time.Time
}

// logLine is the first line of stderr whose message starts with msg.
func logLine(t *testing.T, stderr, msg string) logged {
	t.Helper()
	for _, line := range strings.Split(stderr, "\n") {
		if !strings.Contains(line, `msg="`+msg) {
			continue
		}
		l := logged{text: line}
		at, err := time.Parse(time.RFC3339Nano, l.attr(t, "time"))
		if err != nil {
			t.Fatalf("log line %q: its time: %v", line, err)
		}
		l.at = at
		return l
	}
	t.Fatalf("tether never logged %q; stderr:\n%s", msg, stderr)
	return logged{}
}

// attr is the value of key in the line (unquoted values only).
func (l logged) attr(t *testing.T, key string) string {
	t.Helper()
	for _, f := range strings.Fields(l.text) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	t.Fatalf("log line %q has no %s", l.text, key)
	return ""
}

// duration is the value of key in the line, a duration.
func (l logged) duration(t *testing.T, key string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(l.attr(t, key))
	if err != nil {
		t.Fatalf("log line %q: %s: %v", l.text, key, err)
	}
	return d
}
