package docker_test

import (
	"bytes"
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/tether-run/tether/provider/docker"
)

// TestPauseProgram: /pause is a valid static ELF executable for each
// architecture (one loadable segment holding its entry, no interpreter),
// and on this machine's own architecture it runs, waits, and ends only
// when killed.
func TestPauseProgram(t *testing.T) {
	for arch, machine := range map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64} {
		b, err := docker.PauseProgram(arch)
		if err != nil {
			t.Fatal(err)
		}
		f, err := elf.NewFile(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", arch, err)
		}
		if f.Machine != machine || f.Type != elf.ET_EXEC || f.Class != elf.ELFCLASS64 || len(f.Progs) != 1 {
			t.Fatalf("%s: machine %v, type %v, class %v, %d program headers", arch, f.Machine, f.Type, f.Class, len(f.Progs))
		}
		p := f.Progs[0]
		if p.Type != elf.PT_LOAD || p.Flags != elf.PF_R|elf.PF_X || f.Entry < p.Vaddr || f.Entry >= p.Vaddr+p.Filesz || p.Filesz != uint64(len(b)) {
			t.Fatalf("%s: segment %+v, entry %#x", arch, p.ProgHeader, f.Entry)
		}
	}
	if _, err := docker.PauseProgram("mips"); err == nil {
		t.Fatal("a pause program for mips")
	}
	if runtime.GOOS != "linux" {
		return
	}
	b, err := docker.PauseProgram(runtime.GOARCH)
	if err != nil {
		t.Skip(err)
	}
	path := filepath.Join(t.TempDir(), "pause")
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("pause ended by itself: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	err = <-done
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("pause ended with %v, want killed by SIGKILL", err)
	}
}
