package main

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tether-run/tether/internal/providers"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/provider/e2b/e2btest"
)

// startLocalE2B starts `tether demo e2b --addr 127.0.0.1:0 ARGS`.
func startLocalE2B(t *testing.T, args ...string) *localSim {
	t.Helper()
	return startLocalSim(t, "e2b", "E2B_API_URL", "E2B_API_KEY", args...)
}

// e2bCall makes one call on the simulated E2B API as a client other than
// tether (Go's default User-Agent), and wants status.
func e2bCall(t *testing.T, d *localSim, method, path, body string, status int) []byte {
	t.Helper()
	req, err := http.NewRequest(method, d.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-API-Key", d.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, b, status)
	}
	return b
}

// TestDemoE2B: `tether demo e2b` prints the variables to export, serves
// the simulated E2B API under them, shows its record (GET /_sim/sandboxes
// and ls), and stops cleanly on SIGTERM.
func TestDemoE2B(t *testing.T) {
	d := startLocalE2B(t)
	var sb struct {
		SandboxID string `json:"sandboxID"`
	}
	if err := json.Unmarshal(e2bCall(t, d, "POST", "/sandboxes", `{"templateID":"base","timeout":60,"metadata":{"try":"local"}}`, http.StatusCreated), &sb); err != nil || sb.SandboxID == "" {
		t.Fatalf("create: %v %+v", err, sb)
	}
	resp, err := http.Get(d.url + providers.RecordPath)
	if err != nil {
		t.Fatal(err)
	}
	var rec []providers.DemoSandbox
	err = json.NewDecoder(resp.Body).Decode(&rec)
	resp.Body.Close()
	if err != nil || len(rec) != 1 || rec[0].ID != sb.SandboxID || rec[0].State != e2btest.StateRunning || rec[0].Gone || rec[0].DeletedBy != "" {
		t.Fatalf("record: %+v (%v)", rec, err)
	}
	out := d.ls(t)
	if row := lsRow(out, sb.SandboxID); !strings.Contains(row, " running ") || !strings.Contains(row, "try=local") || !strings.HasSuffix(strings.TrimSpace(row), " -") {
		t.Errorf("ls row %q: want running, its metadata, never killed:\n%s", row, out)
	}
	d.stop(t)
}

// TestDemoE2BLs: `tether demo e2b ls` shows each sandbox, its state and
// what killed it, as `tether demo daytona ls` does: tether's drain of the
// sample runner's sandboxes ("DELETE from tether"), another client's own
// kill (its User-Agent), and one nobody killed — judged against the
// simulator's own record.
func TestDemoE2BLs(t *testing.T) {
	d := startLocalE2B(t)
	// A client other than tether creates two and kills one itself.
	var own []string
	for range 2 {
		var sb struct {
			SandboxID string `json:"sandboxID"`
		}
		if err := json.Unmarshal(e2bCall(t, d, "POST", "/sandboxes", `{"templateID":"base","timeout":600}`, http.StatusCreated), &sb); err != nil {
			t.Fatal(err)
		}
		own = append(own, sb.SandboxID)
	}
	e2bCall(t, d, "DELETE", "/sandboxes/"+own[0], "", http.StatusNoContent)

	// The sample runner creates three under tether run and exits without
	// cleaning up: tether's drain kills them.
	cmd := exec.Command(tetherBin, "run", "--", tetherBin, "demo", "runner", "--provider", "e2b", "--sandboxes", "3", "--exit", "0")
	cmd.Env = append(os.Environ(), isolatedEnv(t)...)
	cmd.Env = append(cmd.Env, "E2B_API_URL="+d.url, "E2B_API_KEY="+d.key, "DAYTONA_API_KEY=", "DAYTONA_API_URL=")
	cmd.WaitDelay = time.Second
	if out, err := cmd.CombinedOutput(); err != nil || strings.Count("\n"+string(out), "\ncreated ") != 3 {
		t.Fatalf("tether run -- tether demo runner --provider e2b: %v\n%s", err, out)
	}

	var out string
	testutil.Eventually(t, "the runner's three sandboxes killed by tether, by ls", func() (bool, string) {
		out = d.ls(t)
		return strings.Count(out, "DELETE from tether") == 3, out
	})
	if !strings.Contains(out, "5 sandboxes, 1 never deleted") {
		t.Errorf("ls summary: want 5 sandboxes, 1 never deleted:\n%s", out)
	}
	if row := lsRow(out, own[0]); !strings.Contains(row, " killed ") || !strings.Contains(row, "DELETE from Go-http-client/") {
		t.Errorf("the sandbox its own client killed: %q, want killed, DELETE from Go-http-client/…:\n%s", row, out)
	}
	if row := lsRow(out, own[1]); !strings.Contains(row, " running ") || !strings.HasSuffix(strings.TrimSpace(row), " -") {
		t.Errorf("the sandbox nobody killed: %q, want running, never deleted:\n%s", row, out)
	}
	// ls says what the simulator's own record says, sandbox by sandbox.
	var rec []providers.DemoSandbox
	if err := json.Unmarshal([]byte(d.ls(t, "--json")), &rec); err != nil {
		t.Fatal(err)
	}
	byTether := 0
	for _, sb := range rec {
		row := lsRow(out, sb.ID)
		if !strings.Contains(row, " "+sb.State+" ") || sb.DeletedBy != "" && !strings.Contains(row, sb.DeletedBy) {
			t.Errorf("ls row %q disagrees with the record %+v", row, sb)
		}
		if sb.DeletedBy == "DELETE from tether" {
			byTether++
			if !sb.Gone || sb.State != e2btest.StateKilled || !strings.HasPrefix(sb.Name, "tether-") || !strings.Contains(row, sb.Name) {
				t.Errorf("a sandbox of tether's drain: %+v, want killed, named tether-…, the name in ls", sb)
			}
		}
	}
	if byTether != 3 {
		t.Errorf("%d sandboxes killed by tether in the record, want 3: %+v", byTether, rec)
	}

	// Without --addr, ls finds the simulator the exported URL names.
	ls := exec.Command(tetherBin, "demo", "e2b", "ls")
	ls.Env = append(os.Environ(), "E2B_API_URL="+d.url)
	if got, err := ls.Output(); err != nil || !strings.Contains(string(got), "5 sandboxes, 1 never deleted") {
		t.Errorf("ls with E2B_API_URL=%s and no --addr: %v\n%s", d.url, err, got)
	}
	// With nothing listening, ls says how to start one.
	ls = exec.Command(tetherBin, "demo", "e2b", "ls", "--addr", "127.0.0.1:1")
	var stderr strings.Builder
	ls.Stderr = &stderr
	var ee *exec.ExitError
	if err := ls.Run(); !errors.As(err, &ee) || ee.ExitCode() != exitCodeUsage || !strings.Contains(stderr.String(), "no simulated E2B at 127.0.0.1:1 (start one with tether demo e2b --addr 127.0.0.1:1)") {
		t.Errorf("ls with nothing listening: %v, %q", err, stderr.String())
	}
	d.stop(t)
}
