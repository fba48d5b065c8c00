// Command gofloor is the floor for any Go supervisor in bench/startup.sh: it
// catches the same signals tether forwards (all but KILL, STOP, CHLD, URG and
// the runtime's 32 to 34), starts the child, forwards what it catches, waits
// and exits with the child's code. No journal, no socket, no drain: what is
// left of tether's start-up cost above this is tether's own.
//
//	gofloor CMD [ARGS...]
package main

import (
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

func main() {
	var sigs []os.Signal
	for n := 1; n <= 64; n++ {
		s := syscall.Signal(n)
		if s == syscall.SIGKILL || s == syscall.SIGSTOP || s == syscall.SIGCHLD || s == syscall.SIGURG || (n >= 32 && n <= 34) {
			continue
		}
		sigs = append(sigs, s)
	}
	c := make(chan os.Signal, 64)
	signal.Notify(c, sigs...)

	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		os.Exit(127)
	}
	go func() {
		for s := range c {
			_ = cmd.Process.Signal(s)
		}
	}()
	err := cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			os.Exit(128 + int(ws.Signal()))
		}
		os.Exit(ee.ExitCode())
	}
	if err != nil {
		os.Exit(125)
	}
}
