package supervisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tether-run/tether/internal/testutil"
)

// helperEnv makes the re-executed test binary act as the child (runHelper).
const helperEnv = "SUPERVISOR_TEST_HELPER"

// waitLimit bounds every wait; each ends as soon as its condition holds.
const waitLimit = testutil.WaitBound

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(runHelper(os.Args[1:]))
	}
	// The helpers are this binary; under -race each would sleep 1 s at exit.
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	// Run leaves nothing running behind it: no reaper, copier or actor goroutine.
	goleak.VerifyTestMain(m)
}

func runHelper(args []string) int {
	switch args[0] {
	case "exit":
		n, _ := strconv.Atoi(args[1])
		return n
	case "cat":
		io.Copy(os.Stdout, os.Stdin)
		fmt.Fprint(os.Stderr, "err")
		return 0
	case "until-term": // says ready on stdout, exits 0 on SIGTERM
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		fmt.Println("ready")
		<-ch
		return 0
	}
	return 2
}

func helper(args ...string) []string { return append([]string{os.Args[0]}, args...) }

func testConfig(t *testing.T, args ...string) Config {
	t.Helper()
	return Config{
		Command: helper(args...),
		Env:     []string{helperEnv + "=1"},
		Grace:   time.Hour, // tests that stop the child must not depend on the grace
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		Stdin:   strings.NewReader(""),
		Stdout:  io.Discard,
		Stderr:  io.Discard,
	}
}

// The tests below run Run in this process, one at a time: Run owns the
// process's SIGCHLD and reaps every child it has.

func TestRunNoCommand(t *testing.T) {
	st, err := Run(context.Background(), Config{})
	if !errors.Is(err, ErrNoCommand) || st.Code != 125 {
		t.Fatalf("Run with no command: %v, %+v; want ErrNoCommand and 125", err, st)
	}
}

func TestRunAfterChildGetsTheChildsStatus(t *testing.T) {
	cfg := testConfig(t, "exit", "3")
	var got *Status
	cfg.AfterChild = func(ctx context.Context, st Status) error {
		got = &st
		return nil
	}
	st, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if st.Code != 3 || got == nil || got.Code != 3 {
		t.Fatalf("Run status %+v, AfterChild got %+v; want code 3 in both", st, got)
	}
}

func TestRunAfterChildErrorIsTethersOwn(t *testing.T) {
	cfg := testConfig(t, "exit", "0")
	boom := errors.New("drain failed")
	cfg.AfterChild = func(context.Context, Status) error { return boom }
	st, err := Run(context.Background(), cfg)
	if !errors.Is(err, boom) || st.Code != 0 {
		t.Fatalf("got %+v, %v; want status 0 and the AfterChild error", st, err)
	}
}

func TestRunStartFailureStillRunsAfterChild(t *testing.T) {
	cfg := testConfig(t)
	cfg.Command = []string{"tether-test-no-such-command"}
	ran := false
	cfg.AfterChild = func(context.Context, Status) error { ran = true; return nil }
	st, err := Run(context.Background(), cfg)
	if err != nil || st.Code != ExitCodeNotFound || st.Err == nil || !ran {
		t.Fatalf("got %+v, %v, AfterChild ran %v; want 127 with a reason and the drain run", st, err, ran)
	}
}

func TestRunActorsRunAndAreInterruptedWhenTheChildEnds(t *testing.T) {
	cfg := testConfig(t, "exit", "5")
	stop := make(chan struct{})
	var interrupted bool
	cfg.Actors = []Actor{{
		Name:      "blocker",
		Execute:   func() error { <-stop; return nil },
		Interrupt: func(error) { interrupted = true; close(stop) },
	}}
	st, err := Run(context.Background(), cfg)
	if err != nil || st.Code != 5 || !interrupted {
		t.Fatalf("got %+v, %v, interrupted %v; want 5, nil, true", st, err, interrupted)
	}
}

func TestRunFailingActorStopsTheChild(t *testing.T) {
	cfg := testConfig(t, "until-term")
	out := &testutil.Buffer{}
	cfg.Stdout = out
	boom := errors.New("socket gone")
	cfg.Actors = []Actor{{
		Name: "api",
		Execute: func() error {
			// Fail once the child is up, so it is the one to be stopped.
			testutil.Poll(func() bool { return strings.Contains(out.String(), "ready") })
			return boom
		},
		Interrupt: func(error) {},
	}}
	st, err := Run(context.Background(), cfg)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "api") {
		t.Fatalf("error %v; want the actor's, named", err)
	}
	if st.Code != 0 {
		t.Fatalf("status %+v; want the child's 0 (it exits 0 on SIGTERM)", st)
	}
}

func TestRunContextEndStopsTheChild(t *testing.T) {
	cfg := testConfig(t, "until-term")
	out := &testutil.Buffer{}
	cfg.Stdout = out
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		testutil.Poll(func() bool { return strings.Contains(out.String(), "ready") })
		cancel()
	}()
	st, err := Run(ctx, cfg)
	if err != nil || st.Code != 0 {
		t.Fatalf("got %+v, %v; want the child's 0 after SIGTERM", st, err)
	}
}

func TestRunPipesNonFileStdio(t *testing.T) {
	cfg := testConfig(t, "cat")
	var stdout, stderr bytes.Buffer
	cfg.Stdin = strings.NewReader("through a pipe\n")
	cfg.Stdout, cfg.Stderr = &stdout, &stderr
	st, err := Run(context.Background(), cfg)
	if err != nil || st.Code != 0 {
		t.Fatalf("got %+v, %v", st, err)
	}
	if stdout.String() != "through a pipe\n" || stderr.String() != "err" {
		t.Fatalf("stdout %q, stderr %q", stdout.String(), stderr.String())
	}
}

func TestRunEnvLastValueWins(t *testing.T) {
	env := childEnv([]string{"TETHER_X=1", "TETHER_X=2", "PATH=/nowhere"})
	n := 0
	for _, kv := range env {
		if strings.HasPrefix(kv, "TETHER_X=") {
			n++
			if kv != "TETHER_X=2" {
				t.Fatalf("got %q, want TETHER_X=2", kv)
			}
		}
		if strings.HasPrefix(kv, "PATH=") && kv != "PATH=/nowhere" {
			t.Fatalf("got %q, want the extra PATH", kv)
		}
	}
	if n != 1 {
		t.Fatalf("TETHER_X appears %d times", n)
	}
}

// TestRunSignalsDuringAfterChildDoNotAbortIt: a second docker stop SIGTERM
// while the drain runs is logged, not obeyed (its default would kill tether).
func TestRunSignalsDuringAfterChildDoNotAbortIt(t *testing.T) {
	cfg := testConfig(t, "exit", "0")
	logs := &testutil.Buffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	cfg.AfterChild = func(ctx context.Context, st Status) error {
		if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
			return err
		}
		testutil.WaitFor(t, "the SIGTERM to be logged", func() bool {
			return strings.Contains(logs.String(), "signal received after the child ended")
		})
		return nil
	}
	if st, err := Run(context.Background(), cfg); err != nil || st.Code != 0 {
		t.Fatalf("got %+v, %v", st, err)
	}
}

// TestRunWait4Race: orphans exiting around the main child never make Run
// lose the main child's status.
func TestRunWait4Race(t *testing.T) {
	for i := 0; i < 30; i++ {
		cfg := testConfig(t)
		cfg.Command = []string{"/bin/sh", "-c", "i=0; while [ $i -lt 40 ]; do (exit 9) & i=$((i+1)); done; exit 42"}
		st, err := Run(context.Background(), cfg)
		if err != nil || st.Code != 42 {
			t.Fatalf("round %d: got %+v, %v; want 42", i, st, err)
		}
	}
}

func TestForwardedSignals(t *testing.T) {
	seen := map[os.Signal]bool{}
	for _, s := range forwardedSignals() {
		seen[s] = true
	}
	for _, never := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP, syscall.SIGCHLD, syscall.SIGURG,
		syscall.SIGPIPE, syscall.SIGXFSZ, syscall.SIGXCPU, syscall.SIGTTIN, syscall.SIGTTOU} {
		if seen[never] {
			t.Errorf("%v is forwarded; it must not be", never)
		}
	}
	for _, must := range []syscall.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2,
		syscall.SIGTERM, syscall.SIGWINCH, syscall.SIGCONT, syscall.SIGALRM, syscall.SIGTSTP} {
		if !seen[must] {
			t.Errorf("%v is not forwarded", must)
		}
	}
}
