package testutil

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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
// (they are kept in a directory named after that go command's process), so
// `go test ./...` links tether once, not once per package. A test process
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

// binDir is the directory of this go test run's binaries: shared when the
// parent is a go command, named after its pid and start time (a later run
// with a reused pid gets another directory), else this process's own.
func binDir() (string, error) {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.dir != "" {
		return builds.dir, nil
	}
	if run, ok := goRun(os.Getppid()); ok {
		removeStale()
		dir := filepath.Join(os.TempDir(), binPrefix+run)
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

const binPrefix = "tether-testbin-run-"

// goRun names the go command with that pid, "PID-STARTTIME", if it is one.
func goRun(pid int) (string, bool) {
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil || strings.TrimSpace(string(comm)) != "go" {
		return "", false
	}
	start, ok := startTime(pid)
	if !ok {
		return "", false
	}
	return strconv.Itoa(pid) + "-" + start, true
}

// startTime is field 22 of /proc/PID/stat, the process's start in clock
// ticks since boot.
func startTime(pid int) (string, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", false
	}
	i := bytes.LastIndexByte(b, ')') // the command name may hold spaces
	if i < 0 {
		return "", false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return "", false
	}
	return f[19], true
}

// removeStale removes the binaries of go test runs that have ended.
func removeStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), binPrefix+"*"))
	for _, d := range dirs {
		pid, start, ok := strings.Cut(strings.TrimPrefix(filepath.Base(d), binPrefix), "-")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(pid)
		if err != nil {
			continue
		}
		if now, alive := startTime(n); alive && now == start {
			continue
		}
		os.RemoveAll(d)
	}
}
