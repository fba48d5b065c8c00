package e2e_test

// Hostile input against the real binary: a spool directory that
// others may write, with symbolic links planted in rejected/, FIFOs,
// directories and oversized files named NAME.json, files of a uid the
// socket would refuse, 10,000 files at once; and a journal of 10,000 live
// intents with no provider. Each test asserts a clear error or continued
// service, and that no acknowledged intent is lost: every intent whose file
// the protocol's writer renamed in is journaled, and every such sandbox is
// destroyed in the simulator's own record.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/intake/spooldir"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/journal"
)

const nobody = 65534

// asNobody returns the command line prefix that runs a program as uid and
// gid 65534, or skips the test with the reason.
func asNobody(t *testing.T) []string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to act as another uid (setpriv); run the suite as root, as .ci/run does")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv not installed (util-linux; .ci/run installs it)")
	}
	return []string{setpriv, fmt.Sprintf("--reuid=%d", nobody), fmt.Sprintf("--regid=%d", nobody), "--clear-groups"}
}

// nobodyCan makes dir and its parents up to w.dir searchable by others, so a
// writer running as nobody reaches the spool directory.
func (w *world) nobodyCan() {
	w.t.Helper()
	if err := os.Chmod(w.dir, 0o711); err != nil {
		w.t.Fatal(err)
	}
}

// sleeper starts `tether run` with a child that lives until tether stops
// it, and waits until the socket answers.
func (w *world) sleeper(env []string, flags ...string) *proc {
	w.t.Helper()
	args := append(w.tetherArgs("run"), "--drain-timeout", drainTimeout)
	args = append(args, flags...)
	args = append(args, "--", "sleep", "3600")
	p := w.startEnv(env, args...)
	testutil.WaitFor(w.t, "tether's socket", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := w.client().Health(ctx)
		return err == nil
	})
	return p
}

// startEnv is start with env in place of w.env when env is not nil.
func (w *world) startEnv(env []string, args ...string) *proc {
	if env == nil {
		return w.start(args...)
	}
	saved := w.env
	w.env = env
	defer func() { w.env = saved }()
	return w.start(args...)
}

// healthy fails the test unless tether still answers on its socket.
func (w *world) healthy(after string) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	if _, err := w.client().Health(ctx); err != nil {
		w.t.Fatalf("after %s, tether does not answer: %v", after, err)
	}
}

// goodIntent declares an intent through the spool as the protocol's writer
// does, creates its sandbox in the simulator with tether's name and labels,
// and reports the sandbox id through the spool: an acknowledged intent
// whose sandbox the drain must destroy.
func (w *world) goodIntent(id string) string {
	w.t.Helper()
	if _, err := spooldir.Write(w.spool, spooldir.FileOp{Op: spooldir.OpIntent, ID: id}); err != nil {
		w.t.Fatal(err)
	}
	sb := w.plantOurs(intent.NamePrefix+id, map[string]string{intent.LabelOwner: w.owner, intent.LabelIntent: id, "e2e": "yes"})
	if _, err := spooldir.Write(w.spool, spooldir.FileOp{Op: spooldir.OpObserve, ID: id, SandboxID: sb.ID}); err != nil {
		w.t.Fatal(err)
	}
	testutil.WaitFor(w.t, "intent "+id+" observed", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		in, err := w.client().Get(ctx, id)
		return err == nil && in.SandboxID == sb.ID
	})
	return sb.ID
}

func (w *world) rejected(slot string) string {
	w.t.Helper()
	var b []byte
	testutil.WaitFor(w.t, "rejected/"+slot+".err", func() bool {
		var err error
		b, err = os.ReadFile(filepath.Join(w.spool, spooldir.RejectedDir, slot+".err"))
		return err == nil && len(b) > 0
	})
	return string(b)
}

// TestHostileSpool: a spool directory anyone may write to (sticky, like
// /tmp), under attack while tether runs. Nothing is written through a
// planted link, nothing of a refused uid is journaled, every hostile file is
// rejected with a reason, tether keeps serving, and every acknowledged
// intent's sandbox ends destroyed.
func TestHostileSpool(t *testing.T) {
	t.Parallel()
	nob := asNobody(t)
	w := newWorld(t)
	w.nobodyCan()
	if err := os.Mkdir(w.spool, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(w.spool, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	p := w.sleeper(nil)
	var sandboxes []string
	sandboxes = append(sandboxes, w.goodIntent("good-before"))

	// rejected/x.err and x.json planted as links to a root-owned file.
	victim := filepath.Join(w.dir, "victim")
	os.WriteFile(victim, []byte("precious\n"), 0o644)
	for _, name := range []string{"x.err", "x.json"} {
		if err := os.Symlink(victim, filepath.Join(w.spool, spooldir.RejectedDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	// nobody writes x.json, a valid op.
	sh := func(script string) {
		t.Helper()
		cmd := exec.Command(nob[0], append(nob[1:], "/bin/sh", "-c", script)...)
		cmd.Dir = w.spool
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("as nobody: %s: %v\n%s", script, err, out)
		}
	}
	sh(`printf '{"op":"intent","id":"nobodys"}' > .x.tmp && mv .x.tmp x.json`)
	if r := w.rejected("x.1"); !strings.Contains(r, "uid 65534") || !strings.Contains(r, "may not use tether") {
		t.Fatalf("x.1.err = %q; want the refused uid named", r)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
		t.Fatalf("the planted link was written through: victim now %q", b)
	}
	w.healthy("a file of a refused uid and planted links")

	// An allowed writer's FIFO, directory and oversized file, each under a
	// NAME.json (a refused uid's are refused for their owner first).
	if err := syscall.Mkfifo(filepath.Join(w.spool, "fifo.json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := w.rejected("fifo"); !strings.Contains(r, "named pipe") {
		t.Fatalf("fifo.err = %q", r)
	}
	os.Mkdir(filepath.Join(w.spool, ".d.tmp"), 0o700)
	os.WriteFile(filepath.Join(w.spool, ".d.tmp", "inside"), []byte("x"), 0o600)
	os.Rename(filepath.Join(w.spool, ".d.tmp"), filepath.Join(w.spool, "d.json"))
	if r := w.rejected("d"); !strings.Contains(r, "directory") {
		t.Fatalf("d.err = %q", r)
	}
	spoolWriteRaw(t, w.spool, "big", `{"op":"intent","id":"big","labels":{"k":"`+strings.Repeat("v", 1<<20)+`"}}`)
	if r := w.rejected("big"); !strings.Contains(r, "larger than") {
		t.Fatalf("big.err = %q", r)
	}
	// The same name again (from root, so it is read): a second reason, the
	// first kept.
	spoolWriteRaw(t, w.spool, "big", `{"op":"intent","id":"NOT-AN-ID"}`)
	if r := w.rejected("big.1"); !strings.Contains(r, "[a-z0-9_-]") {
		t.Fatalf("big.1.err = %q", r)
	}
	if r := w.rejected("big"); !strings.Contains(r, "larger than") {
		t.Fatalf("big.err overwritten: %q", r)
	}
	w.healthy("FIFOs, directories and oversized files")
	sandboxes = append(sandboxes, w.goodIntent("good-after"))

	code := p.stop(syscall.SIGTERM)
	if code != 128+int(syscall.SIGTERM) {
		t.Fatalf("tether exited %d, want %d (the child's TERM); stderr:\n%s", code, 128+int(syscall.SIGTERM), p.stderr)
	}
	rep := mustReport(t, p.stderr.String())
	if rep.left != 0 || rep.counts["gone"] != len(sandboxes) {
		t.Fatalf("report: %+v; want %d gone, none left", rep, len(sandboxes))
	}
	w.assertDestroyed(sandboxes...)
	j, err := journal.Open(w.journal, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	all, _ := j.All()
	for _, in := range all {
		if in.ID != "good-before" && in.ID != "good-after" {
			t.Errorf("journaled from a hostile file: %+v", in)
		}
	}
	if len(all) != 2 {
		t.Fatalf("journal holds %d intents, want the 2 acknowledged", len(all))
	}
}

// spoolWriteRaw writes content as NAME.json the protocol's way, without
// validating it.
func spoolWriteRaw(t *testing.T, dir, name, content string) {
	t.Helper()
	tmp := filepath.Join(dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name+".json")); err != nil {
		t.Fatal(err)
	}
}

// TestHostileSpoolDirectoryRefused: tether refuses to start, before the
// child runs, on a spool directory others may write (not sticky), one owned
// by a uid that may not use tether, or one whose rejected/ is a symbolic
// link; the error names the directory and the setting to change, and
// nothing is written where the link points.
func TestHostileSpoolDirectoryRefused(t *testing.T) {
	cases := []struct {
		name  string
		root  bool
		plant func(t *testing.T, w *world, outside string)
		says  string
	}{
		{"world-writable", false, func(t *testing.T, w *world, _ string) {
			os.Mkdir(w.spool, 0o700)
			os.Chmod(w.spool, 0o777)
		}, "lets others write"},
		{"owned by nobody", true, func(t *testing.T, w *world, _ string) {
			os.Mkdir(w.spool, 0o700)
			if err := os.Chown(w.spool, nobody, nobody); err != nil {
				t.Fatal(err)
			}
		}, "owned by uid 65534"},
		{"rejected is a symlink", false, func(t *testing.T, w *world, outside string) {
			os.Mkdir(w.spool, 0o700)
			os.Symlink(outside, filepath.Join(w.spool, spooldir.RejectedDir))
			spoolWriteRaw(t, w.spool, "bad", `{"op":"intent","id":"BAD"}`)
		}, "rejected/: not a directory but a symbolic link"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.root && os.Geteuid() != 0 {
				t.Skip("needs root to chown; run the suite as root, as .ci/run does")
			}
			w := newWorld(t)
			outside := t.TempDir()
			c.plant(t, w, outside)
			marker := filepath.Join(w.dir, "child-ran")
			args := append(w.tetherArgs("run"), "--", "touch", marker)
			code, stderr := w.runTether(args...)
			if code != 125 || !strings.Contains(stderr, c.says) || !strings.Contains(stderr, "--spool or TETHER_SPOOL") || !strings.Contains(stderr, w.spool) {
				t.Fatalf("exit %d; want 125 naming %s, %q and the setting; stderr:\n%s", code, w.spool, c.says, stderr)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("the child ran although tether refused its spool directory")
			}
			if entries, _ := os.ReadDir(outside); len(entries) != 0 {
				t.Fatalf("written through the link: %v", entries)
			}
		})
	}
}

// TestHostileSpoolTenThousandFiles: 10,000 intent files at once, with
// hostile ones among them, and no provider: every acknowledged intent is
// journaled, every hostile file rejected, and the output stays bounded.
func TestHostileSpoolTenThousandFiles(t *testing.T) {
	t.Parallel()
	computes(t)
	const n = 10000
	w := newWorld(t)
	if err := os.Mkdir(w.spool, 0o700); err != nil {
		t.Fatal(err)
	}
	// Written as the protocol's writer does, without an fsync each (the
	// machine does not crash here, and 10,000 fsyncs would only slow the
	// test down).
	for i := range n {
		spoolWriteRaw(t, w.spool, fmt.Sprintf("%05d", i), fmt.Sprintf(`{"op":"intent","id":"bulk-%05d"}`, i))
		if i%1000 == 500 {
			spoolWriteRaw(t, w.spool, fmt.Sprintf("%05d-bad", i), `{"op":"intent","id":"bulk-bad","extra":1}`)
			syscall.Mkfifo(filepath.Join(w.spool, fmt.Sprintf("%05d-fifo.json", i)), 0o600)
		}
	}
	// No provider: nothing can be deleted, and the drain says so briefly.
	var env []string
	for _, kv := range w.env {
		if !strings.HasPrefix(kv, "DAYTONA_") {
			env = append(env, kv)
		}
	}
	// The child waits until the spool holds no NAME.json any more.
	script := `while ls "$TETHER_SPOOL" | grep -q '\.json$'; do sleep 0.05; done`
	p := w.startEnv(env, append(w.tetherArgs("run"), "--", "/bin/sh", "-c", script)...)
	if code := p.wait(); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, p.stderr)
	}
	stderr := p.stderr.String()
	if !strings.Contains(stderr, fmt.Sprintf("drain: %d intents", n)) || !strings.Contains(stderr, "no provider") {
		t.Fatalf("report does not count %d intents left for want of a provider:\n%.4000s", n, stderr)
	}
	// 20 rejected files, a few lines each, and a short report: far below
	// one line per intent (10,000 lines would be about 1 MB).
	if len(stderr) > 32<<10 {
		t.Fatalf("stderr is %d bytes for %d intents; want it bounded:\n%.4000s", len(stderr), n, stderr)
	}
	j, err := journal.Open(w.journal, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for i := range n {
		in, err := j.Get(fmt.Sprintf("bulk-%05d", i))
		if err != nil || !in.Live() {
			t.Fatalf("acknowledged intent bulk-%05d: %+v, %v", i, in, err)
		}
	}
	if c, _ := j.LiveCount(); c != n {
		t.Fatalf("%d live intents, want %d", c, n)
	}
	rej, _ := os.ReadDir(filepath.Join(w.spool, spooldir.RejectedDir))
	if len(rej) != 4*(n/1000) {
		t.Fatalf("%d entries in rejected/, want %d (a .json and a .err per hostile file)", len(rej), 4*(n/1000))
	}
}

// TestScaleNoProvider: `tether run -- true` on a journal an earlier run
// left with 10,000 live intents, without credentials, does no work per
// intent: a count and one line saying why, every intent exactly as it was.
func TestScaleNoProvider(t *testing.T) {
	t.Parallel()
	computes(t)
	const n = 10000
	w := newWorld(t)
	j, err := journal.Open(w.journal, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := g; i < n; i += 32 {
				if _, _, err := j.Create(context.Background(), intent.Declaration{Labels: map[string]string{"i": fmt.Sprint(i)}, Provider: "daytona"}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	before, _ := j.Live()
	j.Close()

	var env []string
	for _, kv := range w.env {
		if !strings.HasPrefix(kv, "DAYTONA_") {
			env = append(env, kv)
		}
	}
	p := w.startEnv(env, append(w.tetherArgs("run"), "--", "true")...)
	if code := p.wait(); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, p.stderr)
	}
	stderr := p.stderr.String()
	// A few lines whatever n: the two start-up lines (where the Daytona
	// settings came from, where the state is), the warning, the report.
	if lines := strings.Count(stderr, "\n"); lines > 6 || !strings.Contains(stderr, fmt.Sprintf("%d left live", n)) || !strings.Contains(stderr, "no provider") {
		t.Fatalf("%d lines on stderr; want at most 6 saying %d left live for want of a provider:\n%.4000s", lines, n, stderr)
	}
	j, err = journal.Open(w.journal, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	after, _ := j.Live()
	if len(after) != n {
		t.Fatalf("%d live after, want %d", len(after), n)
	}
	for i := range after {
		if after[i].ID != before[i].ID || !after[i].UpdatedAt.Equal(before[i].UpdatedAt) || after[i].LastError != before[i].LastError {
			t.Fatalf("intent %s was written without a provider: %+v, was %+v", after[i].ID, after[i], before[i])
		}
	}
}

// TestStartErrorsNameTheSetting: a start that fails on a path says which
// setting to change, and a journal that could not be created is not
// described as a file to move aside; `tether drain` on a missing journal
// exits 125 (as README's table says) without creating one.
func TestStartErrorsNameTheSetting(t *testing.T) {
	w := newWorld(t)
	code, stderr := w.runTether("drain", "--journal", filepath.Join(w.dir, "missing", "journal.db"))
	if code != 125 || !strings.Contains(stderr, "missing") {
		t.Fatalf("drain of a missing journal: exit %d; stderr:\n%s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(w.dir, "missing")); err == nil {
		t.Fatal("tether drain created the missing journal's directory")
	}

	// A user who may not write where the journal (or socket) would go.
	var prefix []string
	locked := filepath.Join(w.dir, "locked")
	os.Mkdir(locked, 0o755)
	if os.Geteuid() == 0 {
		prefix = asNobody(t)
		w.nobodyCan()
	} else {
		os.Chmod(locked, 0o555)
	}
	bin := w.tetherFor(prefix)
	mine := filepath.Join(w.dir, "mine")
	os.Mkdir(mine, 0o700)
	if os.Geteuid() == 0 {
		os.Chown(mine, nobody, nobody)
	}
	for _, c := range []struct {
		env     []string
		setting string
	}{
		{[]string{"TETHER_JOURNAL=" + filepath.Join(locked, "journal.db"), "TETHER_SOCKET=" + filepath.Join(mine, "s.sock"), "TETHER_SPOOL=" + filepath.Join(mine, "spool")}, "--journal or TETHER_JOURNAL"},
		{[]string{"TETHER_JOURNAL=" + filepath.Join(mine, "j.db"), "TETHER_SOCKET=" + filepath.Join(locked, "sub", "s.sock"), "TETHER_SPOOL=" + filepath.Join(mine, "spool")}, "--socket or TETHER_SOCKET"},
		{[]string{"TETHER_JOURNAL=" + filepath.Join(mine, "j.db"), "TETHER_SOCKET=" + filepath.Join(mine, "s.sock"), "TETHER_SPOOL=" + locked}, "--spool or TETHER_SPOOL"},
	} {
		cmd := exec.Command(bin[0], append(bin[1:], "run", "--", "true")...)
		cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"}, c.env...)
		out, _ := cmd.CombinedOutput()
		code := cmd.ProcessState.ExitCode()
		if code != 125 || !strings.Contains(string(out), c.setting) || strings.Contains(string(out), "move it aside") {
			t.Errorf("%v: exit %d; want 125 naming %s, without 'move it aside':\n%s", c.env, code, c.setting, out)
		}
	}
}

// tetherFor is the tether binary's command line run through prefix (e.g.
// setpriv), copied where that user can run it.
func (w *world) tetherFor(prefix []string) []string {
	w.t.Helper()
	if len(prefix) == 0 {
		return []string{bin.tether}
	}
	return append(append([]string{}, prefix...), w.copyExecutable(bin.tether, "tether"))
}

// TestHostileSpoolNonRootTether: tether running as an ordinary user
// (nobody) on a sticky spool directory: a file of a third uid, which it may
// not even read, is rejected naming that uid; its own user's file is
// journaled.
func TestHostileSpoolNonRootTether(t *testing.T) {
	nob := asNobody(t)
	w := newWorld(t)
	w.nobodyCan()
	home := filepath.Join(w.dir, "nobody")
	os.Mkdir(home, 0o700)
	if err := os.Chown(home, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	spoolDir := filepath.Join(home, "spool")
	os.Mkdir(spoolDir, 0o700)
	os.Chmod(spoolDir, 0o777|os.ModeSticky)
	os.Chown(spoolDir, nobody, nobody)
	const stranger = 4242
	tmp := filepath.Join(spoolDir, ".strangers.tmp")
	os.WriteFile(tmp, []byte(`{"op":"intent","id":"strangers"}`), 0o600)
	os.Chown(tmp, stranger, stranger)
	os.Rename(tmp, filepath.Join(spoolDir, "strangers.json"))
	tmp = filepath.Join(spoolDir, ".mine.tmp")
	os.WriteFile(tmp, []byte(`{"op":"intent","id":"mine"}`), 0o600)
	os.Chown(tmp, nobody, nobody)
	os.Rename(tmp, filepath.Join(spoolDir, "mine.json"))

	journalPath := filepath.Join(home, "journal.db")
	cmdline := w.tetherFor(nob)
	cmd := exec.Command(cmdline[0], append(cmdline[1:], "run", "--journal", journalPath, "--socket", filepath.Join(home, "t.sock"), "--spool", spoolDir,
		"--", "/bin/sh", "-c", `while ls "$TETHER_SPOOL" | grep -q '\.json$'; do sleep 0.05; done`)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tether as nobody: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(spoolDir, spooldir.RejectedDir, "strangers.err"))
	if err != nil || !strings.Contains(string(b), "uid 4242") {
		t.Fatalf("strangers.err = %q, %v; want the uid named\n%s", b, err, out)
	}
	// Root refuses a journal another uid owns (it could have changed it):
	// the test takes over the one nobody's tether left before reading it.
	for _, p := range []string{home, journalPath, journalPath + journal.MarkerSuffix} {
		if err := os.Chown(p, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	j, err := journal.Open(journalPath, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if _, err := j.Get("mine"); err != nil {
		t.Fatalf("tether's own user's file: %v\n%s", err, out)
	}
	if _, err := j.Get("strangers"); err == nil {
		t.Fatal("a file of a uid that may not use tether was journaled")
	}
}
