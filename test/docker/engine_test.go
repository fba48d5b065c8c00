//go:build docker

package docker_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/testutil"

	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// waitBound bounds every wait for one event: testutil's.
const waitBound = testutil.WaitBound

// Simulated timings: short, but deletion is visibly asynchronous.
const (
	simCreateDelay  = 10 * time.Millisecond
	simDestroyDelay = 50 * time.Millisecond
)

// envStopRuns sets how many times TestDockerStop50 repeats (default
// defaultStopRuns; the documented run in docs/benchmarks.md uses 20).
const (
	envStopRuns     = "TETHER_DOCKER_STOP_RUNS"
	defaultStopRuns = 3
)

// envRequire makes a missing Docker engine a failure rather than a skip;
// .ci/run sets it (CI=true does the same).
const envRequire = "TETHER_REQUIRE_DOCKER"

// image is the FROM scratch image built once for all tests: tether as the
// ENTRYPOINT, the sample runner and the probe beside it, the host's CA
// bundle, the journal's directory as a volume.
var image string

// testID tags every image, container and volume a run makes, so cleanup
// removes exactly those.
var testID = randomHex(4)

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	if err := exec.Command("docker", "info").Run(); err != nil {
		if os.Getenv(envRequire) != "" || os.Getenv("CI") == "true" {
			fmt.Fprintf(os.Stderr, "FAIL: the Docker engine tests are required here (%s or CI=true), but `docker info` failed: %v\n", envRequire, err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "SKIP: no Docker engine (`docker info`: %v): the Docker engine tests did not run\n", err)
		return 0
	}
	dir, err := os.MkdirTemp("", "tether-docker-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	image = "tether-test:" + testID
	if err := buildImage(dir, image); err != nil {
		fmt.Fprintln(os.Stderr, "build the image:", err)
		return 1
	}
	defer exec.Command("docker", "rmi", "-f", image).Run()
	// The Docker provider's tests (provider_test.go): their sandbox image
	// and tether binary, if they built them.
	defer exec.Command("docker", "rmi", "-f", bbImage).Run()
	defer testutil.Cleanup()
	defer func() { podmanStop() }()
	defer func() {
		if goClientBin != "" {
			os.RemoveAll(filepath.Dir(goClientBin))
		}
	}()
	return m.Run()
}

// buildImage builds the image with examples/docker/build-offline.sh, the
// documented way to build it with no registry, with the sample runner, the
// probe and test/e2brunner (a zero-code runner of E2B and Daytona) beside
// tether. The script's root file system goes in as a tar,
// so the modes are exact: /tmp, /var/lib/tether and /run/tether
// world-writable with the sticky bit, as the root Dockerfile makes them.
func buildImage(dir, tag string) error {
	runner := sampleRunnerPkg
	script, err := filepath.Abs("../../examples/docker/build-offline.sh")
	if err != nil {
		return err
	}
	cmd := exec.Command(script, "-t", tag, "runner="+runner, "probe=github.com/tether-run/tether/test/docker/probe",
		"e2brunner=github.com/tether-run/tether/test/e2brunner")
	cmd.Env = append(os.Environ(), "TMPDIR="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v\n%s", script, err, out)
	}
	return nil
}

// sampleRunnerPkg is the sample runner's command (package samplerunner,
// as the end-to-end tests run it).
const sampleRunnerPkg = "github.com/tether-run/tether/test/runner"

// dockerBuild builds the context dir as tag with the classic builder: the
// engine has no registry to pull BuildKit's front end from.
func dockerBuild(ctx, tag string) error {
	cmd := exec.Command("docker", "build", "-q", "-t", tag, ctx)
	cmd.Env = append(os.Environ(), "DOCKER_BUILDKIT=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("docker build: %v\n%s", err, out)
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// docker runs the docker CLI and returns its combined output.
func docker(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func mustDocker(t *testing.T, args ...string) string {
	t.Helper()
	out, err := docker(t, args...)
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// newVolume makes a named volume removed at the end of the test.
func newVolume(t *testing.T) string {
	t.Helper()
	name := "tether-test-" + testID + "-" + randomHex(3)
	mustDocker(t, "volume", "create", name)
	t.Cleanup(func() { docker(t, "volume", "rm", "-f", name) })
	return name
}

// journalDir is a host directory to bind-mount at /var/lib/tether, so the
// test can open the journal once the container is gone.
func journalDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "tether-docker-journal-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	return dir
}

// --- the simulated Daytona, on the host's loopback ---

type world struct {
	t          *testing.T
	sim        *daytonatest.Server
	neighbours []string // planted by plantNeighbours; never to be touched
}

func newWorld(t *testing.T, opts ...daytonatest.Option) *world {
	t.Helper()
	sim, _ := testutil.Daytona(t, append([]daytonatest.Option{
		daytonatest.WithCreateDelay(simCreateDelay),
		daytonatest.WithDestroyDelay(simDestroyDelay),
	}, opts...)...)
	return &world{t: t, sim: sim}
}

// newTLSWorld serves the simulator over https with httptest's own
// certificate, and returns the PEM of its CA.
func newTLSWorld(t *testing.T) (*world, []byte) {
	t.Helper()
	sim := daytonatest.NewUnstartedServer(daytonatest.WithCreateDelay(simCreateDelay), daytonatest.WithDestroyDelay(simDestroyDelay))
	hs := httptest.NewUnstartedServer(sim.Handler())
	// The container without the CA fails every handshake; that is tested,
	// not logged.
	hs.Config.ErrorLog = log.New(io.Discard, "", 0)
	hs.StartTLS()
	t.Cleanup(func() { sim.Close(); hs.Close() })
	sim.URL = hs.URL + "/api"
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: hs.Certificate().Raw})
	return &world{t: t, sim: sim}, ca
}

// env is what every container gets to reach the simulator.
func (w *world) env() []string {
	return []string{"DAYTONA_API_URL=" + w.sim.URL, "DAYTONA_API_KEY=" + daytonatest.DefaultKey}
}

// ours is every sandbox the runner created (all carry run=<label>; the
// neighbours planted beside them are not ours).
func (w *world) ours(label string) []daytonatest.Sandbox {
	var out []daytonatest.Sandbox
	for _, sb := range w.sim.Sandboxes() {
		if sb.Labels["run"] == label && !slices.Contains(w.neighbours, sb.ID) {
			out = append(out, sb)
		}
	}
	return out
}

// assertAllDestroyed: exactly want sandboxes of the run exist, each was
// asked to be deleted and answers 404 (destroyed), per the simulator.
func (w *world) assertAllDestroyed(label string, want int) {
	w.t.Helper()
	got := w.ours(label)
	if len(got) != want {
		w.t.Errorf("the simulator has %d sandboxes of run %s, want %d", len(got), label, want)
	}
	for _, sb := range got {
		if sb.State != "destroyed" || !sb.DeleteRequested {
			w.t.Errorf("sandbox %s (%s): state %s, delete requested %v; want destroyed", sb.ID, sb.Name, sb.State, sb.DeleteRequested)
		}
	}
}

// --- containers ---

// runOpts describe one `docker run`.
type runOpts struct {
	docker []string // options of docker run (--user, --init, -v ...)
	env    []string
	args   []string // after the image: the command tether runs
}

// container is one attached `docker run`: its stdout lines (the runner's,
// passed through tether), its stderr (tether's logs and report).
type container struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	lines  chan string
	stderr *testutil.Buffer
	done   chan struct{}
}

// run starts a container of img on the host's network (the simulator
// listens on the host's loopback).
func run(t *testing.T, img string, o runOpts) *container {
	t.Helper()
	name := "tether-test-" + testID + "-" + randomHex(3)
	args := []string{"run", "--name", name, "--network", "host", "--label", "tether-test=" + testID}
	args = append(args, o.docker...)
	for _, e := range o.env {
		args = append(args, "-e", e)
	}
	args = append(args, img)
	args = append(args, o.args...)
	cmd := exec.Command("docker", args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &container{t: t, name: name, cmd: cmd, lines: make(chan string, 4096), stderr: &testutil.Buffer{}, done: make(chan struct{})}
	cmd.Stderr = c.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("docker run: %v", err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
		_ = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		// Twice: the first may come before `docker run` created it.
		docker(t, "rm", "-f", "-v", name)
		<-c.done
		docker(t, "rm", "-f", "-v", name)
		if t.Failed() {
			t.Logf("container %s stderr:\n%s", name, c.stderr.String())
		}
	})
	return c
}

// runner lines: "created <intent> <name> <sandbox>", "orphan <pid>", "ready".
type line struct{ fields []string }

// ready reads the container's stdout until "ready" and returns what came before.
func (c *container) ready() []line {
	c.t.Helper()
	var out []line
	timeout := time.NewTimer(waitBound)
	defer timeout.Stop()
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				<-c.done
				c.t.Fatalf("container exited before ready; stderr:\n%s", c.stderr)
			}
			if l == "ready" {
				return out
			}
			out = append(out, line{strings.Fields(l)})
		case <-timeout.C:
			c.t.Fatalf("not ready within %s; stderr:\n%s", waitBound, c.stderr)
		}
	}
}

// wait waits for the container to end and returns its exit code.
func (c *container) wait() int {
	c.t.Helper()
	go func() {
		for range c.lines { // keep the pipe flowing
		}
	}()
	// The attached `docker run` ends with the container (`docker wait`
	// could come before the container exists).
	select {
	case <-c.done:
	case <-time.After(waitBound):
		c.t.Fatalf("container %s did not end within %s", c.name, waitBound)
	}
	out := mustDocker(c.t, "inspect", "-f", "{{.State.ExitCode}}", c.name)
	code, err := strconv.Atoi(out)
	if err != nil {
		c.t.Fatalf("docker inspect %s: %q", c.name, out)
	}
	return code
}

// stop runs `docker stop [-t N]` and returns how long it took and the
// container's exit code.
func (c *container) stop(timeout ...string) (time.Duration, int) {
	c.t.Helper()
	args := []string{"stop"}
	if len(timeout) > 0 {
		args = append(args, "-t", timeout[0])
	}
	start := time.Now()
	mustDocker(c.t, append(args, c.name)...)
	took := time.Since(start)
	return took, c.wait()
}

// exec runs `docker exec [opts] C cmd...`.
func (c *container) exec(opts []string, cmd ...string) (string, error) {
	c.t.Helper()
	args := append([]string{"exec"}, opts...)
	args = append(args, c.name)
	return docker(c.t, append(args, cmd...)...)
}

// --- tether's report and journal ---

var reportHead = regexp.MustCompile(`(?m)^tether: drain: (\d+) intents? in (\S+), (\d+) left live$`)

// drainReport returns the intents, the time and the number left live of
// the last drain report on stderr.
func drainReport(t *testing.T, stderr string) (total int, took time.Duration, left int) {
	t.Helper()
	m := reportHead.FindAllStringSubmatch(stderr, -1)
	if len(m) == 0 {
		t.Fatalf("no drain report on tether's stderr:\n%s", stderr)
	}
	last := m[len(m)-1]
	total, _ = strconv.Atoi(last[1])
	took, _ = time.ParseDuration(last[2])
	left, _ = strconv.Atoi(last[3])
	return total, took, left
}

// liveIntents opens the journal a container running as root left in dir:
// the shared volume holds one directory per uid.
func liveIntents(t *testing.T, dir string) []intent.Intent {
	t.Helper()
	j, err := journal.Open(filepath.Join(dir, "uid-0", "journal.db"), journal.Options{})
	if err != nil {
		t.Fatalf("open the journal: %v", err)
	}
	defer j.Close()
	live, err := j.Live()
	if err != nil {
		t.Fatal(err)
	}
	return live
}

func stopRuns(t *testing.T) int {
	v := os.Getenv(envStopRuns)
	if v == "" {
		return defaultStopRuns
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a whole number >= 1", envStopRuns, v)
	}
	return n
}
