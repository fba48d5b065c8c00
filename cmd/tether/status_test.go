package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/intentapi"
	"github.com/tether-run/tether/intentapi/client"
	"github.com/tether-run/tether/internal/config"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/journal"
)

// tetherCmd runs the real binary with args and env (TETHER_* cleared) and
// returns stdout, stderr and the exit code.
func tetherCmd(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(tetherBin, args...)
	cmd.Env = append(os.Environ(), "TETHER_SOCKET=", "TETHER_SPOOL=", "TETHER_OWNER=", "TETHER_LABELS=", "TETHER_JOURNAL=")
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

// deadJournal leaves a journal as a dead container would: two live intents
// (one tether failed on), one gone.
func deadJournal(t *testing.T, path string) (owner string, live []intent.Intent, gone intent.Intent) {
	t.Helper()
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for i := 0; i < 3; i++ {
		in, _, err := j.Create(t.Context(), intent.Declaration{Labels: map[string]string{"run": "7"}})
		if err != nil {
			t.Fatal(err)
		}
		switch i {
		case 0:
			if in, err = j.Observe(in.ID, "sb-0"); err != nil {
				t.Fatal(err)
			}
			if in, err = j.Note(in.ID, "daytona delete sb-0: provider unavailable: HTTP 503"); err != nil {
				t.Fatal(err)
			}
			live = append(live, in)
		case 1:
			live = append(live, in)
		case 2:
			if _, err := j.Transition(in.ID, intent.Releasing, ""); err != nil {
				t.Fatal(err)
			}
			if gone, err = j.Transition(in.ID, intent.Gone, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	return j.Owner(), live, gone
}

func TestStatusOfADeadJournal(t *testing.T) {
	journalPath := filepath.Join(t.TempDir(), "journal.db")
	owner, live, gone := deadJournal(t, journalPath)
	before, _ := os.ReadFile(journalPath)

	out, errOut, code := tetherCmd(t, nil, "status", "--journal", journalPath)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.Contains(lines[0], owner) || !strings.Contains(lines[0], "read-only") || !strings.HasPrefix(lines[1], "2 live") {
		t.Fatalf("header:\n%s", out)
	}
	if !strings.Contains(lines[1], "(1 pending, 1 observed), unresolved") {
		t.Fatalf("counts by state:\n%s", out)
	}
	// The table: header, then the live intent tether failed on, the other
	// live one, then the finished one.
	rows := lines[slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "STATE") }):]
	if len(rows) != 4 || !strings.HasPrefix(rows[0], "STATE") {
		t.Fatalf("table:\n%s", out)
	}
	for i, want := range []struct {
		in    intent.Intent
		state string
	}{{live[0], "observed"}, {live[1], "pending"}, {gone, "gone"}} {
		f := strings.Fields(rows[i+1])
		if f[0] != want.state || f[1] != want.in.Name {
			t.Fatalf("row %d: %q, want %s %s", i, rows[i+1], want.state, want.in.Name)
		}
	}
	if !strings.Contains(rows[1], "sb-0") || !strings.Contains(rows[1], "HTTP 503") || strings.Fields(rows[1])[4] != "1" {
		t.Fatalf("failed intent's row lacks sandbox, attempts or error: %q", rows[1])
	}
	after, _ := os.ReadFile(journalPath)
	if !bytes.Equal(before, after) {
		t.Fatal("status changed the journal file")
	}

	out, _, code = tetherCmd(t, nil, "status", "--journal", journalPath, "--json", "--recent", "0")
	var rep statusReport
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil {
		t.Fatalf("--json: exit %d: %s", code, out)
	}
	if rep.Owner != owner || rep.Source != "journal" || len(rep.Live) != 2 || len(rep.Recent) != 0 || rep.Live[0].LastError == "" {
		t.Fatalf("--json: %+v", rep)
	}

	// No journal there: an error, and no journal made.
	missing := filepath.Join(t.TempDir(), "none.db")
	_, errOut, code = tetherCmd(t, nil, "status", "--journal", missing)
	if code != exitCodeUsage || !strings.Contains(errOut, missing) {
		t.Fatalf("missing journal: exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("status created a journal")
	}
}

func TestStatusBesideARunningTether(t *testing.T) {
	dir, err := os.MkdirTemp("", "tstat")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	journalPath, sock := filepath.Join(dir, "journal.db"), filepath.Join(dir, "t.sock")
	run := exec.Command(tetherBin, "run", "--journal", journalPath, "--socket", sock, "--spool", filepath.Join(dir, "spool"),
		"--daytona-proxy=false", "--", "sleep", "600")
	run.Env = append(os.Environ(), "DAYTONA_API_KEY=", "DAYTONA_JWT_TOKEN=")
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { run.Process.Signal(syscall.SIGTERM); run.Wait() }()
	c := client.New(sock)
	testutil.WaitFor(t, "tether's socket", func() bool { _, err := c.Health(t.Context()); return err == nil })
	var names []string
	for i := 0; i < 3; i++ {
		in, err := c.CreateIntent(t.Context(), intentapi.CreateRequest{})
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, in.Name)
	}

	// Through the socket.
	out, errOut, code := tetherCmd(t, nil, "status", "--socket", sock, "--json")
	var rep statusReport
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil {
		t.Fatalf("exit %d: %s %s", code, out, errOut)
	}
	if rep.Source != "socket" || len(rep.Live) != 3 || rep.Live[2].Name != names[2] || rep.LiveTotal != 3 || rep.Counts["pending"] != 3 {
		t.Fatalf("over the socket: %+v", rep)
	}
	// Worded for a healthy running tether: its runner's sandboxes, not leaks.
	out, _, _ = tetherCmd(t, nil, "status", "--socket", sock)
	if !strings.Contains(out, "3 live (3 pending): sandboxes the runner declared") || strings.Contains(out, "unresolved") {
		t.Fatalf("wording beside a running tether:\n%s", out)
	}

	// The journal alone, held by the running tether: refused at once (the
	// read-only open does not wait for the lock), saying why — unless a
	// tether serves the default socket on this machine, which is then asked.
	if found, _ := config.FindSocket(); found != "" {
		t.Logf("a tether serves %s here; skipping the held-journal case", found)
		return
	}
	start := time.Now()
	_, errOut, code = tetherCmd(t, nil, "status", "--journal", journalPath)
	if code != exitCodeUsage || !strings.Contains(errOut, "held by a running tether") {
		t.Fatalf("held journal: exit %d: %s", code, errOut)
	}
	if el := time.Since(start); el > waitLimit {
		t.Fatalf("status waited %s beside a live tether", el)
	}
}

// TestStatusPages: a journal with more live intents than a page shows the
// counts of all of them and one page, with the token of the next; the
// pages together, and --all, are every live intent once.
func TestStatusPages(t *testing.T) {
	journalPath := filepath.Join(t.TempDir(), "journal.db")
	j, err := journal.Open(journalPath, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 25
	for i := range n {
		in, _, err := j.Create(t.Context(), intent.Declaration{})
		if err != nil {
			t.Fatal(err)
		}
		if i%5 == 0 {
			if _, err := j.Observe(in.ID, fmt.Sprint("sb-", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	j.Close()

	out, errOut, code := tetherCmd(t, nil, "status", "--journal", journalPath, "--limit", "10")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "25 live (20 pending, 5 observed)") || !strings.Contains(out, "showing 10 of them; next page: tether status --page-token ") {
		t.Fatalf("first page:\n%s", out)
	}
	seen := map[string]bool{}
	token := ""
	for page := 0; ; page++ {
		if page > n {
			t.Fatal("the pages do not end")
		}
		args := []string{"status", "--journal", journalPath, "--limit", "10", "--json"}
		if token != "" {
			args = append(args, "--page-token", token)
		}
		out, errOut, code := tetherCmd(t, nil, args...)
		var rep statusReport
		if code != 0 || json.Unmarshal([]byte(out), &rep) != nil {
			t.Fatalf("page %d: exit %d: %s %s", page, code, out, errOut)
		}
		if rep.LiveTotal != n || rep.Counts["pending"] != 20 || len(rep.Live) > 10 {
			t.Fatalf("page %d: total %d, counts %v, %d on the page", page, rep.LiveTotal, rep.Counts, len(rep.Live))
		}
		for _, in := range rep.Live {
			if seen[in.ID] {
				t.Fatalf("%s on two pages", in.ID)
			}
			seen[in.ID] = true
		}
		if token = rep.NextPageToken; token == "" {
			break
		}
	}
	if len(seen) != n {
		t.Fatalf("the pages showed %d of %d", len(seen), n)
	}
	out, _, code = tetherCmd(t, nil, "status", "--journal", journalPath, "--limit", "10", "--all", "--json")
	var rep statusReport
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Live) != n || rep.NextPageToken != "" {
		t.Fatalf("--all: exit %d, %d live, next %q", code, len(rep.Live), rep.NextPageToken)
	}
	if _, errOut, code := tetherCmd(t, nil, "status", "--journal", journalPath, "--all", "--page-token", "x"); code != exitCodeUsage || !strings.Contains(errOut, "--all and --page-token") {
		t.Fatalf("--all with --page-token: exit %d: %s", code, errOut)
	}
}
