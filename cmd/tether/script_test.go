package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestScripts runs testdata/script/*.txtar: every subcommand's help and
// usage errors, against the real binary. Besides the usual commands a
// script has
//
//	tether CODE ARGS...
//
// which runs the tether binary with ARGS (in the script's environment,
// with no TETHER_*, DAYTONA_* or E2B_* variable but those it sets) and
// fails unless it exits CODE;
// its stdout and stderr are then checked with stdout and stderr.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir: filepath.Join("testdata", "script"),
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"tether": runTetherScript,
		},
	})
}

func runTetherScript(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("usage: tether CODE ARGS... (the exit code is the assertion; no !)")
	}
	if len(args) < 1 {
		ts.Fatalf("usage: tether CODE ARGS...")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("tether: exit code %q: %v", args[0], err)
	}
	cmd := exec.Command(tetherBin, args[1:]...)
	cmd.Dir = ts.Getenv("WORK")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + ts.Getenv("HOME"), "TMPDIR=" + ts.Getenv("TMPDIR"), "GORACE=" + os.Getenv("GORACE")}
	for _, k := range []string{"TETHER_JOURNAL", "TETHER_LABELS", "TETHER_GRACE", "DAYTONA_API_KEY", "DAYTONA_API_URL", "E2B_DOMAIN", "TETHER_E2B_MAX_TIMEOUT"} {
		if v := ts.Getenv(k); v != "" {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.Stdout, cmd.Stderr = ts.Stdout(), ts.Stderr()
	err = cmd.Run()
	got := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		got = ee.ExitCode()
	} else if err != nil {
		ts.Fatalf("tether: %v", err)
	}
	if got != want {
		ts.Fatalf("tether %v: exit %d, want %d", args[1:], got, want)
	}
}
