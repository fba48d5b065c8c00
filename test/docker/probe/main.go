// Command probe is the child the Docker engine tests run under tether as
// PID 1 of a FROM scratch image (no shell there): it leaves orphans behind,
// exits with a code or dies of a signal, and reports zombies from /proc.
//
//	probe orphans N   start N grandchildren that outlive their parent (they
//	                  become PID 1's), print "orphan <pid>" for each, then
//	                  "ready", and hold until SIGTERM (exit 0)
//	probe exit N      exit with code N
//	probe kill SIG    die of signal number SIG (one the Go runtime dies of: 1, 2, 9, 15)
//	probe hold        print "ready", exit 0 on SIGTERM
//	probe pids        print "<pid> <state>" of every process (Z: zombie)
//	probe stat PATH   exit 0 if PATH exists
//	probe sleep D     sleep for duration D (the orphans do this)
package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: probe orphans N | exit N | kill SIG | hold | pids | stat PATH | sleep D")
		os.Exit(2)
	}
	arg := ""
	if len(os.Args) > 2 {
		arg = os.Args[2]
	}
	switch os.Args[1] {
	case "orphans":
		n, _ := strconv.Atoi(arg)
		// A middle process starts the orphans and exits without waiting
		// for them, so they are re-parented to PID 1 (or the subreaper).
		mid := exec.Command(os.Args[0], "spawn", strconv.Itoa(n))
		mid.Stdout, mid.Stderr = os.Stdout, os.Stderr
		if err := mid.Run(); err != nil {
			fatal(err)
		}
		fmt.Println("ready")
		hold()
	case "spawn":
		n, _ := strconv.Atoi(arg)
		for i := 0; i < n; i++ {
			c := exec.Command(os.Args[0], "sleep", "300ms")
			if err := c.Start(); err != nil {
				fatal(err)
			}
			fmt.Printf("orphan %d\n", c.Process.Pid)
		}
	case "exit":
		code, _ := strconv.Atoi(arg)
		os.Exit(code)
	case "kill":
		sig, _ := strconv.Atoi(arg)
		signal.Reset()
		_ = syscall.Kill(os.Getpid(), syscall.Signal(sig))
		time.Sleep(time.Minute)
	case "hold":
		fmt.Println("ready")
		hold()
	case "pids":
		stats, _ := filepath.Glob("/proc/[0-9]*/stat")
		for _, f := range stats {
			b, err := os.ReadFile(f)
			if err != nil {
				continue // gone meanwhile
			}
			// "pid (comm) S ...": the state follows the last ')'.
			s := string(b)
			if i := strings.LastIndexByte(s, ')'); i > 0 && len(s) > i+2 {
				fmt.Println(strings.Fields(s)[0], string(s[i+2]))
			}
		}
	case "stat":
		if _, err := os.Stat(arg); err != nil {
			fatal(err)
		}
	case "sleep":
		d, err := time.ParseDuration(arg)
		if err != nil {
			fatal(err)
		}
		time.Sleep(d)
	default:
		fatal(fmt.Errorf("unknown mode %q", os.Args[1]))
	}
}

func hold() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM)
	<-c
	os.Exit(0)
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "probe:", err)
	os.Exit(1)
}
