package examples_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// tryItURL is the address every "Try it locally" block uses: the default
// of `tether demo daytona`.
const tryItAddr = "127.0.0.1:3986"

// tryItBlocks returns the shell blocks of a README's "Try it locally"
// section that use the simulated Daytona (they export its URL).
func tryItBlocks(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Try it locally\n")
	if !ok {
		t.Fatalf("%s has no \"## Try it locally\" section", path)
	}
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	var blocks []string
	for _, part := range strings.Split(section, "```sh\n")[1:] {
		block, _, _ := strings.Cut(part, "```")
		if strings.Contains(block, "export DAYTONA_API_URL=http://"+tryItAddr+"/api") {
			blocks = append(blocks, block)
		}
	}
	if len(blocks) == 0 {
		t.Fatalf("%s: no block of \"Try it locally\" exports the simulated Daytona's URL", path)
	}
	return blocks
}

// TestTryItLocally runs the "Try it locally" block of the main README and
// of each runner example as written, in its directory, with the tether
// just built first on PATH, against a `tether demo daytona` of its own (on
// a free port written into the block in place of 3986), with its journal,
// socket and spool in a temporary directory. The block's last command is
// `tether demo daytona ls`; by its record every sandbox must have been
// deleted, some by tether. The Docker and Kubernetes blocks need an image
// and run by hand (test/docker runs the same settings).
func TestTryItLocally(t *testing.T) {
	for _, tc := range []struct {
		readme, dir, tool string
	}{
		{"../README.md", "..", ""},
		{"node/README.md", "node", "node"},
		{"python/README.md", "python", "python3"},
		{"shell/README.md", "shell", "timeout"},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			if tc.tool != "" {
				if _, err := exec.LookPath(tc.tool); err != nil {
					t.Skipf("SKIP: %s is not installed: the block of %s did not run", tc.tool, tc.readme)
				}
			}
			for _, block := range tryItBlocks(t, tc.readme) {
				addr := startLocalDaytona(t)
				script := strings.ReplaceAll(block, tryItAddr, addr)
				cmd := exec.Command("sh", "-e", "-c", script)
				cmd.Dir = tc.dir
				dir := shortTempDir(t)
				var env []string
				for _, kv := range os.Environ() {
					if !strings.HasPrefix(kv, "TETHER_") && !strings.HasPrefix(kv, "DAYTONA_") && !strings.HasPrefix(kv, "PATH=") {
						env = append(env, kv)
					}
				}
				cmd.Env = append(env, "PATH="+tetherDir+":"+os.Getenv("PATH"),
					"TETHER_JOURNAL="+filepath.Join(dir, "journal.db"),
					"TETHER_SOCKET="+filepath.Join(dir, "t.sock"),
					"TETHER_SPOOL="+filepath.Join(dir, "spool"),
					"TETHER_LOG_LEVEL=warn")
				cmd.WaitDelay = time.Second
				done := make(chan struct{})
				var out []byte
				var err error
				go func() {
					out, err = cmd.CombinedOutput()
					close(done)
				}()
				select {
				case <-done:
				case <-time.After(2 * waitBound):
					_ = cmd.Process.Kill()
					<-done
					t.Fatalf("the block did not finish within %s:\n%s\n%s", 2*waitBound, script, out)
				}
				if err != nil {
					t.Fatalf("the block failed: %v\n%s\n--- output:\n%s", err, script, out)
				}
				m := regexp.MustCompile(`(?m)^(\d+) sandboxes, (\d+) never deleted$`).FindAllStringSubmatch(string(out), -1)
				if len(m) == 0 {
					t.Fatalf("the block's output has no tether demo daytona ls summary:\n%s", out)
				}
				last := m[len(m)-1]
				if last[1] == "0" || last[2] != "0" || !strings.Contains(string(out), "DELETE from tether") {
					t.Errorf("ls: %s sandboxes, %s never deleted; want some, all deleted, some by tether:\n%s", last[1], last[2], out)
				}
			}
		})
	}
}

// startLocalDaytona starts `tether demo daytona` on a free loopback port
// and returns its address, from the export line it prints.
func startLocalDaytona(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(tetherDir, "tether"), "demo", "daytona", "--addr", "127.0.0.1:0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "export DAYTONA_API_URL=http://"); ok {
				found <- strings.TrimSuffix(v, "/api")
			}
		}
		close(found)
	}()
	select {
	case addr, ok := <-found:
		if !ok {
			t.Fatal("tether demo daytona exited before printing its URL")
		}
		return addr
	case <-time.After(waitBound):
		t.Fatalf("tether demo daytona printed no URL within %s", waitBound)
	}
	return ""
}

// shortTempDir: Unix socket paths are limited to about 100 bytes.
func shortTempDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "tx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
