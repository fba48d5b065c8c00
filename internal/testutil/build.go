package testutil

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// Module is the import path of tether's module; Build takes packages of it.
const Module = "github.com/tether-run/tether"

// TetherPkg is the tether command.
const TetherPkg = Module + "/cmd/tether"

var builds struct {
	mu   sync.Mutex
	dir  string // where this process's binaries are, shared or its own
	own  bool   // dir is this process's alone: Cleanup removes it
	done map[string]*build
}

type build struct {
	once sync.Once
	path string
	err  error
}

// Tether is the path of the tether binary, built once per `go test` run.
func Tether(t testing.TB) string { return Build(t, TetherPkg) }

// Build returns the path of the binary of pkg (an import path of this
// module) built with tags, failing the test if it does not build.
//
// Each binary is built once per `go test` run: every package's test process
// started by one `go test` command shares the binaries the first one built
// (they are kept in that go command's work directory, which it removes when
// it ends), so `go test ./...` links tether once, not once per package. A test process
// not started by go test builds its own, removed by Cleanup.
func Build(t testing.TB, pkg string, tags ...string) string {
	t.Helper()
	path, err := BuildBinary(pkg, tags...)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// BuildBinary is Build for a TestMain, which has no testing.TB.
func BuildBinary(pkg string, tags ...string) (string, error) {
	key := pkg
	if len(tags) > 0 {
		key += " " + strings.Join(tags, ",")
	}
	builds.mu.Lock()
	if builds.done == nil {
		builds.done = map[string]*build{}
	}
	b := builds.done[key]
	if b == nil {
		b = &build{}
		builds.done[key] = b
	}
	builds.mu.Unlock()
	b.once.Do(func() { b.path, b.err = buildOnce(pkg, tags) })
	return b.path, b.err
}

// Cleanup removes the binaries this test process built for itself (none when
// they are shared with the rest of the go test run). TestMain calls it after
// m.Run.
func Cleanup() {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.own && builds.dir != "" {
		os.RemoveAll(builds.dir)
		builds.dir, builds.own = "", false
	}
}

// Main runs the tests and then Cleanup: os.Exit(testutil.Main(m)).
func Main(m *testing.M) int {
	defer Cleanup()
	return m.Run()
}

func buildOnce(pkg string, tags []string) (string, error) {
	dir, err := binDir()
	if err != nil {
		return "", err
	}
	name := strings.ReplaceAll(strings.TrimPrefix(pkg, Module+"/"), "/", "_")
	if len(tags) > 0 {
		name += "-" + strings.Join(tags, "-")
	}
	out := filepath.Join(dir, name)
	// Another package's test process of the same run may be building the
	// same binary: the lock makes it build once, and the ok file says the
	// build completed (a process killed mid-build leaves none).
	lock, err := os.OpenFile(out+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(out + ".ok"); err == nil {
		return out, nil
	}
	args := []string{"build", "-o", out}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.Command("go", append(args, pkg)...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, stderr.String())
	}
	if err := os.WriteFile(out+".ok", nil, 0o600); err != nil {
		return "", err
	}
	return out, nil
}

// binDir is the directory of this go test run's binaries: inside the go
// command's own work directory when a go command started this process (go
// test runs every package's test binary from WORK/bNNN/, and removes WORK
// when it ends, so nothing is left behind), else this process's own,
// removed by Cleanup.
func binDir() (string, error) {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.dir != "" {
		return builds.dir, nil
	}
	if work, ok := goWork(); ok {
		dir := filepath.Join(work, binDirName)
		if err := os.MkdirAll(dir, 0o700); err == nil {
			builds.dir = dir
			return dir, nil
		}
	}
	dir, err := os.MkdirTemp("", "tether-testbin-own-")
	if err != nil {
		return "", err
	}
	builds.dir, builds.own = dir, true
	return dir, nil
}

// binDirName is the directory of the binaries in the go command's work
// directory.
const binDirName = "tether-testbin"

// goWork is the work directory of the go command that started this test
// process, if one did: the test binary is WORK/bNNN/PKG.test, WORK named
// go-build* (in $GOTMPDIR, else the temporary directory).
func goWork() (string, bool) {
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", os.Getppid()))
	if err != nil || strings.TrimSpace(string(comm)) != "go" {
		return "", false
	}
	exe, err := filepath.Abs(os.Args[0])
	if err != nil {
		return "", false
	}
	work := filepath.Dir(filepath.Dir(exe))
	if !strings.HasPrefix(filepath.Base(work), "go-build") {
		return "", false
	}
	return work, true
}
