package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/intake"
	"github.com/tether-run/tether/internal/intake/socket"
	"github.com/tether-run/tether/internal/intake/spooldir"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/journal"
)

// intentServer serves the intent API on a real socket in this process; the
// binary under test is the real tether, talking to it.
func intentServer(t *testing.T) (sock string, j *journal.Journal) {
	t.Helper()
	dir, err := os.MkdirTemp("", "tint")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	j, err = journal.Open(filepath.Join(dir, "journal.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := &socket.Server{Intake: &intake.Intake{Journal: j, Labels: map[string]string{"scope": "test"},
		Delete: func(ctx context.Context, id string) (intent.Intent, error) {
			if _, err := j.Transition(id, intent.Releasing, ""); err != nil {
				return intent.Intent{}, err
			}
			return j.Transition(id, intent.Gone, "")
		}}}
	sock = filepath.Join(dir, "tether.sock")
	l, err := s.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	t.Cleanup(func() { s.Close(); j.Close() })
	return sock, j
}

// tetherIntent runs `tether intent ARGS...` with env and returns stdout,
// stderr and the exit code.
func tetherIntent(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	return tetherCmd(t, env, append([]string{"intent"}, args...)...)
}

func decodeIntent(t *testing.T, out string) intent.Intent {
	t.Helper()
	var in intent.Intent
	if err := json.Unmarshal([]byte(out), &in); err != nil {
		t.Fatalf("not an intent: %q: %v", out, err)
	}
	return in
}

func TestIntentCommandOverSocket(t *testing.T) {
	sock, j := intentServer(t)
	env := []string{"TETHER_SOCKET=" + sock}

	out, errOut, code := tetherIntent(t, env, "new", "--label", "team=a", "--on-drain", "stop", "--key", "k1")
	if code != 0 {
		t.Fatalf("new: exit %d: %s", code, errOut)
	}
	in := decodeIntent(t, out)
	if in.State != intent.Pending || in.Labels["team"] != "a" || in.Labels["scope"] != "test" || in.OnDrain != intent.DrainStop {
		t.Fatalf("new: %+v", in)
	}
	// The key is the handle, as through the spool: the intent's id, and so
	// its sandbox's name (README §3 runs observe and release by the key).
	if in.ID != "k1" || in.Name != "tether-k1" || in.Labels[intent.LabelIntent] != "k1" {
		t.Fatalf("new --key k1 over the socket: id %q, name %q; want the key as the id, tether-k1 as the name", in.ID, in.Name)
	}
	if got, err := j.Get("k1"); err != nil || got.Name != "tether-k1" {
		t.Fatalf("not journaled under the key: %+v %v", got, err)
	}
	out, _, _ = tetherIntent(t, env, "new", "--key", "k1")
	if again := decodeIntent(t, out); again.ID != in.ID {
		t.Fatalf("retry with the same key gave %s, want %s", again.ID, in.ID)
	}

	out, errOut, code = tetherIntent(t, env, "observe", "k1", "sb-1")
	if code != 0 || decodeIntent(t, out).SandboxID != "sb-1" {
		t.Fatalf("observe: %d %s %s", code, out, errOut)
	}
	// Refused by tether: exit 1 and the reason printed.
	_, errOut, code = tetherIntent(t, env, "observe", in.ID, "sb-2")
	if code != exitCodeRefused || !strings.Contains(errOut, "409") || !strings.Contains(errOut, "already observed") {
		t.Fatalf("observe other: %d %s", code, errOut)
	}
	out, _, code = tetherIntent(t, env, "ls")
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, in.ID) {
		t.Fatalf("ls: %d %q", code, out)
	}
	out, _, code = tetherIntent(t, env, "get", in.ID)
	if code != 0 || decodeIntent(t, out).ID != in.ID {
		t.Fatalf("get: %d %s", code, out)
	}
	// Flags may follow the arguments.
	out, errOut, code = tetherIntent(t, env, "release", "k1", "--outcome", "kept")
	if rel := decodeIntent(t, out); code != 0 || rel.State != intent.Released {
		t.Fatalf("release: %d %s %s", code, out, errOut)
	}
	if got, _ := j.Get(in.ID); got.Outcome != "kept" {
		t.Fatalf("journaled outcome %q, want kept", got.Outcome)
	}
	// Ended, its key is refused, as through the spool: the name
	// tether-k1 is never handed out twice.
	if _, errOut, code := tetherIntent(t, env, "new", "--key", "k1"); code != exitCodeRefused || !strings.Contains(errOut, "409") {
		t.Fatalf("new --key of an ended intent: exit %d %s; want %d, 409", code, errOut, exitCodeRefused)
	}

	out, _, _ = tetherIntent(t, env, "new")
	d := decodeIntent(t, out)
	out, errOut, code = tetherIntent(t, env, "delete", d.ID)
	if code != 0 || decodeIntent(t, out).State != intent.Gone {
		t.Fatalf("delete: %d %s %s", code, out, errOut)
	}
	_, errOut, code = tetherIntent(t, env, "get", "01arz3ndektsv4rrffq69g5fav")
	if code != exitCodeRefused || !strings.Contains(errOut, "404") {
		t.Fatalf("get unknown: %d %s", code, errOut)
	}
}

func TestIntentCommandUsage(t *testing.T) {
	sock, j := intentServer(t)
	env := []string{"TETHER_SOCKET=" + sock}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		says string
	}{
		{"no subcommand", env, nil, "which subcommand"},
		{"unknown subcommand", env, []string{"frobnicate"}, "unknown subcommand"},
		{"bad label", env, []string{"new", "--label", "novalue"}, "k=v"},
		{"reserved label", env, []string{"new", "--label", "tether-owner=x"}, "reserved"},
		{"bad on-drain", env, []string{"new", "--on-drain", "explode"}, "on_drain"},
		{"key not an id", env, []string{"new", "--key", "Job.7"}, "--key: the key is the intent id"},
		{"missing argument", env, []string{"observe", "01arz3ndektsv4rrffq69g5fav"}, "takes 2"},
		{"bad outcome", env, []string{"release", "01arz3ndektsv4rrffq69g5fav", "--outcome", "lost"}, "outcome"},
		{"nowhere to send", nil, []string{"new"}, "TETHER_SOCKET"},
		{"tether not up", []string{"TETHER_SOCKET=/nonexistent/t.sock"}, []string{"ls"}, "/nonexistent/t.sock"},
		{"ls without socket", []string{"TETHER_SPOOL=" + t.TempDir()}, []string{"ls"}, "needs the socket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, code := tetherIntent(t, tc.env, tc.args...)
			if code != exitCodeUsage || !strings.Contains(errOut, tc.says) {
				t.Fatalf("exit %d, stderr %q; want %d saying %q", code, errOut, exitCodeUsage, tc.says)
			}
		})
	}
	if all, _ := j.All(); len(all) != 0 {
		t.Fatalf("a refused command reached the journal: %+v", all)
	}
}

// TestIntentCommandSpool: with only $TETHER_SPOOL the CLI writes spool
// files; an intake on that directory journals them in order.
func TestIntentCommandSpool(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spool")
	os.MkdirAll(dir, 0o700)
	j, err := journal.Open(filepath.Join(t.TempDir(), "journal.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	env := []string{"TETHER_SPOOL=" + dir, "TETHER_OWNER=" + j.Owner(), "TETHER_LABELS=scope=s"}
	out, errOut, code := tetherIntent(t, env, "new", "--label", "team=a")
	if code != 0 {
		t.Fatalf("new: %d %s", code, errOut)
	}
	in := decodeIntent(t, out)
	if intent.ValidateIntentID(in.ID) != nil || in.Name != "tether-"+in.ID || in.Labels[intent.LabelIntent] != in.ID ||
		in.Labels["scope"] != "s" || in.Labels["team"] != "a" {
		t.Fatalf("spool new: %+v", in)
	}
	if _, errOut, code := tetherIntent(t, env, "observe", in.ID, "sb-9"); code != 0 {
		t.Fatalf("observe: %d %s", code, errOut)
	}
	out, _, code = tetherIntent(t, env, "new", "--key", "my-run")
	if code != 0 || decodeIntent(t, out).ID != "my-run" {
		t.Fatalf("new --key: %d %s", code, out)
	}
	if _, errOut, code := tetherIntent(t, env, "release", "my-run"); code != 0 {
		t.Fatalf("release: %d %s", code, errOut)
	}
	if _, _, code := tetherIntent(t, env, "new", "--key", "Not Valid"); code != exitCodeUsage {
		t.Fatalf("invalid client id accepted: %d", code)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 4 {
		t.Fatalf("want 4 spool files, got %v", entries)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	reader := &spooldir.Reader{Intake: &intake.Intake{Journal: j, Labels: map[string]string{"scope": "s"}}, Dir: dir}
	go func() { done <- reader.Run(ctx) }()
	testutil.Eventually(t, "the spool files taken", func() (bool, string) {
		got, err1 := j.Get(in.ID)
		run, err2 := j.Get("my-run")
		return err1 == nil && err2 == nil && got.SandboxID == "sb-9" && run.State == intent.Released,
			fmt.Sprintf("%+v %v / %+v %v", got, err1, run, err2)
	})
	cancel()
	if err := testutil.Receive(t, "done", done); err != nil {
		t.Fatal(err)
	}
	if rej, _ := os.ReadDir(filepath.Join(dir, spooldir.RejectedDir)); len(rej) != 0 {
		t.Fatalf("rejected: %v", rej)
	}
	// What the CLI printed is what tether journaled and will verify: the
	// name and every label, the scope labels of $TETHER_LABELS included.
	got, _ := j.Get(in.ID)
	if got.Name != in.Name || !reflect.DeepEqual(got.Labels, in.Labels) {
		t.Fatalf("printed %s %v, journaled %s %v", in.Name, in.Labels, got.Name, got.Labels)
	}
}
