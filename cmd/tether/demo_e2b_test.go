package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-run/tether/provider/e2b/e2btest"
)

// `tether demo e2b` prints the variables to export, serves the simulated
// E2B API under them, shows its record, and stops cleanly on SIGINT.
func TestDemoE2B(t *testing.T) {
	cmd := exec.Command(tetherBin, "demo", "e2b", "--addr", "127.0.0.1:0")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		done <- cmd.Wait()
	}()
	t.Cleanup(func() { cmd.Process.Kill() })
	var url, key string
	for timeout := time.After(waitLimit); url == "" || key == ""; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("tether demo e2b exited before printing the export lines")
			}
			if v, ok := strings.CutPrefix(l, "export E2B_API_URL="); ok {
				url = v
			}
			if v, ok := strings.CutPrefix(l, "export E2B_API_KEY="); ok {
				key = v
			}
		case <-timeout:
			t.Fatalf("no export lines within %s", waitLimit)
		}
	}
	req, _ := http.NewRequest("POST", url+"/sandboxes", strings.NewReader(`{"templateID":"base","timeout":60}`))
	req.Header.Set("X-API-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %v %v", resp, err)
	}
	resp.Body.Close()
	resp, err = http.Get(url + simSandboxesPath)
	if err != nil {
		t.Fatal(err)
	}
	var rec []e2btest.Sandbox
	json.NewDecoder(resp.Body).Decode(&rec)
	resp.Body.Close()
	if len(rec) != 1 || rec[0].State != e2btest.StateRunning {
		t.Fatalf("record: %+v", rec)
	}
	cmd.Process.Signal(syscall.SIGINT)
	go func() {
		for range lines {
		}
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit: %v", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("did not stop on SIGINT")
	}
}
