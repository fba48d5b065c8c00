//go:build docker

package docker_test

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tether-run/tether/internal/testutil"
)

// TestComposeExample builds examples/docker/Dockerfile and runs
// examples/docker/compose.yaml as a user would, with the test's images in
// place of the two base images (no registry here): the runner image is the
// test image plus a static busybox, for the Dockerfile's RUN line. Its
// stop_grace_period holds: `docker-compose stop` ends with every sandbox
// confirmed destroyed and tether done before the SIGKILL. Scaling the
// runner to two fails and leaves one tether on the journal volume; the
// sweep service runs tether sweep against the same account.
func TestComposeExample(t *testing.T) {
	const sandboxes = 5
	compose, err := exec.LookPath("docker-compose")
	if err != nil {
		t.Skip("SKIP: docker-compose is not installed: the compose example did not run")
	}
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("SKIP: busybox is not installed (Debian: busybox-static): the compose example did not run")
	}
	runnerImage := image + "-shell"
	if err := buildShellImage(t, busybox, runnerImage); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { docker(t, "rmi", "-f", runnerImage) })

	w := newWorld(t)
	examples, err := filepath.Abs("../../examples")
	if err != nil {
		t.Fatal(err)
	}
	// The simulator is on the host's loopback, and the runner is the test's.
	override := filepath.Join(t.TempDir(), "override.yaml")
	if err := os.WriteFile(override, []byte(fmt.Sprintf(`services:
  runner:
    network_mode: host
    command: ["runner", "--sandboxes", "%d", "--label", "compose"]
  sweep:
    network_mode: host
`, sandboxes)), 0o644); err != nil {
		t.Fatal(err)
	}
	project := "tether-test-" + testID
	container := project + "-runner"
	dc := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*waitBound)
		defer cancel()
		cmd := exec.CommandContext(ctx, compose, append([]string{"-p", project, "-f", filepath.Join(examples, "docker", "compose.yaml"), "-f", override}, args...)...)
		cmd.Env = append(os.Environ(), "RUNNER_CONTAINER="+container, "TETHER_IMAGE="+image, "RUNNER_IMAGE="+runnerImage, "DAYTONA_API_URL="+w.sim.URL, "DAYTONA_API_KEY=test-key", "DOCKER_BUILDKIT=0", "COMPOSE_DOCKER_CLI_BUILD=0")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() {
		if out, err := dc("down", "-v", "--rmi", "local"); err != nil {
			t.Logf("docker-compose down: %v\n%s", err, out)
		}
	})
	if out, err := dc("up", "-d", "--build"); err != nil {
		t.Fatalf("docker-compose up: %v\n%s", err, out)
	}
	observed := func() (bool, string) {
		out, _ := docker(t, "exec", container, "tether", "intent", "ls")
		n := strings.Count(out, `"state":"observed"`)
		return n == sandboxes, fmt.Sprintf("%d observed: %s", n, out)
	}
	testutil.Eventually(t, "the runner's sandboxes observed", observed)

	// A second replica would share the journal volume: Compose must refuse it.
	if out, err := dc("up", "-d", "--no-recreate", "--scale", "runner=2"); err == nil {
		t.Errorf("docker-compose up --scale runner=2 succeeded; want it refused (one tether per journal volume):\n%s", out)
	}
	ids := strings.Fields(mustDocker(t, "ps", "-aq", "--filter", "label=com.docker.compose.project="+project, "--filter", "label=com.docker.compose.service=runner"))
	if len(ids) != 1 {
		t.Errorf("%d runner containers after the scale, want 1: %v", len(ids), ids)
	}
	if ok, got := observed(); !ok {
		t.Errorf("after the refused scale, the runner's tether: %s", got)
	}

	// The sweep service: a dry run of nothing stale is exit 0 with the table.
	if out, err := dc("run", "--rm", "sweep"); err != nil {
		t.Errorf("docker-compose run --rm sweep: %v\n%s", err, out)
	} else {
		t.Logf("sweep:\n%s", out)
	}
	start := time.Now()
	if out, err := dc("stop"); err != nil {
		t.Fatalf("docker-compose stop: %v\n%s", err, out)
	}
	took := time.Since(start)
	code := mustDocker(t, "inspect", "-f", "{{.State.ExitCode}}", container)
	logs, _ := docker(t, "logs", container)
	if code != fmt.Sprint(exitTERM) {
		t.Errorf("exit %s, want %d (tether done before the SIGKILL); logs:\n%s", code, exitTERM, logs)
	}
	if total, _, left := drainReport(t, logs); total != sandboxes || left != 0 {
		t.Errorf("report: %d intents, %d left live; want %d, 0", total, left, sandboxes)
	}
	w.assertAllDestroyed("compose", sandboxes)
	vol := mustDocker(t, "inspect", "-f", `{{range .Mounts}}{{if eq .Destination "/var/lib/tether"}}{{.Type}} {{.Name}}{{end}}{{end}}`, container)
	if vol != "volume "+project+"_tether-journal" {
		t.Errorf("/var/lib/tether is %q, want the named volume %s_tether-journal", vol, project)
	}
	t.Logf("docker-compose stop took %s", took.Round(time.Millisecond))
}

// buildShellImage is the test image plus a static busybox as /bin/sh,
// mkdir and chmod: a stand-in for a runner's base image, which has a shell.
func buildShellImage(t *testing.T, busybox, tag string) error {
	t.Helper()
	data, err := os.ReadFile(busybox)
	if err != nil {
		return err
	}
	var rootfs bytes.Buffer
	tw := tar.NewWriter(&rootfs)
	for _, h := range []*tar.Header{
		{Typeflag: tar.TypeDir, Name: "bin/", Mode: 0o755},
		{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(data))},
	} {
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
	}
	if _, err := tw.Write(data); err != nil {
		return err
	}
	for _, l := range []string{"bin/sh", "usr/local/bin/mkdir", "usr/local/bin/chmod"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: l, Linkname: "/bin/busybox"}); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "shell.tar"), rootfs.Bytes(), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM "+image+"\nADD shell.tar /\n"), 0o644); err != nil {
		return err
	}
	return dockerBuild(dir, tag)
}
