package supervisor

import (
	"io"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// TestNoSignalAfterTheGroupIsGone: once tether knows the child's process
// group is gone (reaped, and no member left), its id is free for the kernel
// to give to an unrelated process group, so no signal may go to it any
// more: not a forwarded one, not the TERM after the child's exit, not the
// KILL after the grace. A process group of our own, made with the child's
// old id, stands in for the unrelated one that reused it; it must receive
// nothing.
func TestNoSignalAfterTheGroupIsGone(t *testing.T) {
	bystander := exec.Command("sleep", "60")
	bystander.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := bystander.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := bystander.Process.Pid
	t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })

	ready := make(chan struct{})
	close(ready)
	s := newSupervisor(Config{
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		Signals: &Signals{c: make(chan os.Signal, 1), ready: ready},
	})
	// The child had the bystander's id, and tether has seen its group go.
	s.pid, s.reaped, s.groupGone = pgid, true, true
	close(s.exited)
	close(s.groupEmpty)

	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGKILL} {
		s.forward(sig)
		s.signalGroup(sig)
		s.signalChild(sig)
		s.cfg.SignalChildOnly = !s.cfg.SignalChildOnly
		s.forward(sig)
	}
	// Now the test kills the bystander itself. The first fatal signal a
	// process is sent decides how it died (the kernel records it when the
	// signal is sent), so dying of anything but this SIGKILL means tether
	// signalled it first.
	if err := syscall.Kill(pgid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := bystander.Wait()
	ws := bystander.ProcessState.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the process group that reused the child's id was signalled after tether knew the child's group was gone: it ended with %v (%v)", ws, err)
	}
}
