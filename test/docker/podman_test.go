//go:build docker

package docker_test

// The Docker provider's scenarios against Podman's Docker-compatible
// service (podman system service), where this machine can run it: Podman
// 4.3 as root here needs a containers.conf setting default_ulimits within
// the machine's hard limits (root lacks CAP_SYS_RESOURCE, and Podman would
// raise RLIMIT_NOFILE and RLIMIT_NPROC to 1048576 otherwise:
// libpod/define/config.go:89, pkg/specgen/generate/oci.go:40-74 at
// v4.3.1), named by CONTAINERS_CONF. Without podman the tests skip, unless
// TETHER_REQUIRE_PODMAN is set.

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

const envRequirePodman = "TETHER_REQUIRE_PODMAN"

var (
	podmanOnce sync.Once
	podmanHost string
	podmanErr  error
	podmanStop = func() {}
)

// containersConf keeps Podman's rlimits within this machine's hard limits.
const containersConf = `[containers]
default_ulimits = ["nofile=20000:20000", "nproc=1000:1000"]
`

// podmanEngine serves Podman's service on a socket of the tests' (once)
// with the sandbox image loaded, and returns its DOCKER_HOST.
func podmanEngine(t *testing.T) string {
	t.Helper()
	podman, err := exec.LookPath("podman")
	if err != nil {
		if os.Getenv(envRequirePodman) != "" {
			t.Fatalf("podman is required here (%s) but not installed", envRequirePodman)
		}
		t.Skip("SKIP: podman is not installed (Debian: podman): the Podman scenarios did not run")
	}
	img := sandboxImage(t)
	podmanOnce.Do(func() { podmanHost, podmanErr = startPodman(podman, img) })
	if podmanErr != nil {
		t.Fatal(podmanErr)
	}
	return podmanHost
}

func startPodman(podman, img string) (string, error) {
	dir, err := os.MkdirTemp("", "tp")
	if err != nil {
		return "", err
	}
	conf := filepath.Join(dir, "containers.conf")
	if err := os.WriteFile(conf, []byte(containersConf), 0o644); err != nil {
		return "", err
	}
	sock := filepath.Join(dir, "podman.sock")
	cmd := exec.Command(podman, "system", "service", "--time=0", "unix://"+sock)
	cmd.Env = append(os.Environ(), "CONTAINERS_CONF="+conf)
	if err := cmd.Start(); err != nil {
		return "", err
	}
	podmanStop = func() {
		exec.Command(podman, "rmi", "-f", "localhost/"+img).Run()
		cmd.Process.Kill()
		cmd.Wait()
		os.RemoveAll(dir)
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}, Timeout: time.Second}
	deadline := time.Now().Add(waitBound)
	for {
		resp, err := hc.Get("http://d/_ping")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("podman system service: no answer on %s within %s: %v", sock, waitBound, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	load := exec.Command("sh", "-c", `docker save "$1" | "$2" load`, "sh", img, podman)
	load.Env = cmd.Env
	if out, err := load.CombinedOutput(); err != nil {
		return "", fmt.Errorf("load %s into podman: %v\n%s", img, err, out)
	}
	return "unix://" + sock, nil
}

func newPodmanWorld(t *testing.T) *engineWorld {
	host := podmanEngine(t)
	w := newEngineWorld(t, host)
	w.podman = true
	return w
}

func TestPodmanCLIUnderTether(t *testing.T)     { scenarioCLIUnderTether(t, newPodmanWorld(t)) }
func TestPodmanRunnerKilled20(t *testing.T)     { scenarioRunnerKilled20(t, newPodmanWorld(t)) }
func TestPodmanTetherKilledReplay(t *testing.T) { scenarioTetherKilledThenReplay(t, newPodmanWorld(t)) }
func TestPodmanFailedRunLeavesCreated(t *testing.T) {
	scenarioFailedRunLeavesCreated(t, newPodmanWorld(t))
}
func TestPodmanRmConfirmed(t *testing.T) { scenarioRmConfirmed(t, newPodmanWorld(t)) }
func TestPodmanHijackedSessionBesideCreates(t *testing.T) {
	scenarioHijackedSessionBesideCreates(t, newPodmanWorld(t))
}
func TestPodmanRunTTY(t *testing.T)              { scenarioRunTTY(t, newPodmanWorld(t)) }
func TestPodmanPyUnderTether(t *testing.T)       { scenarioPyUnderTether(t, newPodmanWorld(t)) }
func TestPodmanGoClientUnderTether(t *testing.T) { scenarioGoClientUnderTether(t, newPodmanWorld(t)) }
