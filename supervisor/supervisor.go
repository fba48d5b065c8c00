// Package supervisor runs tether's child (the agent runner) the way an init
// process should: in its own process group, with every catchable signal
// forwarded, zombies reaped (as PID 1 or as child subreaper), a grace period
// before the group is killed, and the child's exit status handed back.
//
// The lifetime is an oklog/run group: one actor owns the child, one forwards
// signals, and callers add their own (the socket API, the spool watcher, the
// boot replay). When the child and what was left of its process group are
// gone, every actor is interrupted and AfterChild (the drain) runs while
// signals are still caught, so a second `docker stop` SIGTERM cannot cut the
// drain short.
//
// The main child is never waited for with exec.Cmd.Wait: one reaper loop
// calls wait4(-1) and recognises the main child's pid, so reaping orphans can
// never steal its exit status. For the same reason nothing else in the
// process may wait for children while Run is active.
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/oklog/run"
)

// Actor is one member of the run group: it runs from before the child starts
// until the child has exited and its process group is gone, and is then
// interrupted. Execute must return once Interrupt has been called; Interrupt
// may be called after Execute has returned.
//
// oklog/run starts actors concurrently with the child, so anything the child
// relies on at start (a listening socket) must be set up before Run is
// called; Execute only serves it. An actor that returns ends the run: the
// child is asked to stop as if tether had received SIGTERM.
type Actor struct {
	Name      string
	Execute   func() error
	Interrupt func(error)
}

// Config says what to run and how. Command is the only required field.
type Config struct {
	Command []string // argv; Command[0] is looked up in PATH unless it contains a slash
	Env     []string // extra KEY=VALUE appended to os.Environ() for the child; a later key wins

	// Grace is the time the child gets after the first SIGTERM/SIGINT (or
	// after a stop request), and the time the rest of its process group gets
	// after the main child exited, before the group is SIGKILLed. Zero kills
	// at once after forwarding the signal.
	Grace time.Duration
	// SignalChildOnly forwards signals to the main child alone instead of its
	// whole process group. The final SIGKILL always goes to the group.
	SignalChildOnly bool
	Logger          *slog.Logger // default slog.Default()

	// Stdin, Stdout and Stderr default to tether's own. An *os.File is handed
	// to the child as is (a TTY stays a TTY); any other reader or writer is
	// connected through a pipe.
	Stdin          io.Reader
	Stdout, Stderr io.Writer

	Actors []Actor
	// Signals, from Catch, are the forwarded signals caught since then; nil
	// makes Run catch them itself.
	Signals *Signals

	// AfterChild runs once the child and what was left of its process group
	// are gone (the drain hooks in here), with Run's context. Signals keep
	// being caught while it runs: a repeated TERM/INT neither aborts nor
	// restarts it, it is only logged. Run's Status stays the child's.
	AfterChild func(ctx context.Context, st Status) error
}

// Status is how the child ended. Code is what tether exits with: the child's
// exit code, 128+N when signal N killed it, 127 when the command was not
// found, 126 when it could not be executed.
type Status struct {
	Code   int
	Signal syscall.Signal // the signal that killed the child, or 0
	Err    error          // why the child could not be started, or nil
}

// Exit codes for a child that never ran, as shells use them.
const (
	ExitCodeNotExecutable = 126
	ExitCodeNotFound      = 127
)

// KillWait bounds the wait for the process group to disappear after it was
// SIGKILLed. A process in uninterruptible sleep (or a zombie whose parent left
// the group and never reaps it) must not hold up the drain forever.
const KillWait = 2 * time.Second

// groupPollInterval is how often Run checks whether the child's process group
// is gone once the main child has exited. SIGCHLD says when one of tether's
// own children died; a group member whose parent is not tether dies silently.
const groupPollInterval = 50 * time.Millisecond

// ErrNoCommand is returned by Run when Config.Command is empty.
var ErrNoCommand = errors.New("no command to run: give one after --, e.g. tether run -- node server.js")

// Run starts cfg.Command and the actors, and returns when the child and its
// process group are gone and AfterChild has returned. The error is only for
// tether's own failures (an actor's error, AfterChild's error, a fork that
// failed for lack of resources); the child's fate is in Status.
func Run(ctx context.Context, cfg Config) (Status, error) {
	if len(cfg.Command) == 0 || cfg.Command[0] == "" {
		return Status{Code: ExitCodeOwnError, Err: ErrNoCommand}, ErrNoCommand
	}
	s := newSupervisor(cfg)
	return s.run(ctx)
}

// supervisor is the state of one Run.
type supervisor struct {
	cfg  Config
	log  *slog.Logger
	term *terminal // nil unless stdin is a terminal and tether is in its foreground

	sigs chan os.Signal // forwarded signals
	chld chan os.Signal // SIGCHLD only: wakes the reaper

	// mu is held across the fork and across each reaping pass, so the reaper
	// cannot collect the main child before its pid is known, and so no signal
	// is sent to a pid or group that has been reaped (and may be reused).
	mu         sync.Mutex
	pid        int // main child; 0 until started
	reaped     bool
	status     syscall.WaitStatus
	groupGone  bool
	exited     chan struct{} // closed when the main child has been reaped
	groupEmpty chan struct{} // closed when no process is left in its group

	childDone chan struct{} // closed when the child actor returns: the child and its group are gone

	stopOnce sync.Once
	stopReq  chan struct{} // closed on the first TERM/INT or stop request: grace starts
	killOnce sync.Once
	killReq  chan struct{} // closed on the second TERM/INT: SIGKILL now

	// startStatus is set when the child never ran (not found, not
	// executable, or a fork that failed); ownErr in the last case.
	startStatus *Status
	ownErr      error

	copies []*stdioCopy // output pipes to non-file writers, drained before Run returns
}

func newSupervisor(cfg Config) *supervisor {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Stdin == nil {
		cfg.Stdin = os.Stdin
	}
	if cfg.Stdout == nil {
		cfg.Stdout = os.Stdout
	}
	if cfg.Stderr == nil {
		cfg.Stderr = os.Stderr
	}
	if cfg.Signals == nil {
		cfg.Signals = Catch()
	}
	return &supervisor{
		cfg:        cfg,
		log:        cfg.Logger,
		sigs:       cfg.Signals.c,
		chld:       make(chan os.Signal, 1),
		exited:     make(chan struct{}),
		groupEmpty: make(chan struct{}),
		childDone:  make(chan struct{}),
		stopReq:    make(chan struct{}),
		killReq:    make(chan struct{}),
	}
}

func (s *supervisor) run(ctx context.Context) (Status, error) {
	if err := becomeSubreaper(); err != nil {
		// Not fatal: the main child is still reaped; only orphans of its
		// descendants would go to PID 1 instead.
		s.log.Warn("cannot become child subreaper; orphaned grandchildren go to init", "err", err)
	}
	s.term = foregroundTerminal(s.cfg.Stdin)

	// Both before the fork: a child that exits at once must still wake the
	// reaper, and a signal sent at once must still be forwarded.
	signal.Notify(s.chld, syscall.SIGCHLD)
	s.cfg.Signals.wait()
	// Stopping costs what catching did (one round trip per signal); the
	// caller is usually about to exit, so it is not made to wait for it.
	defer func() { go signal.Stop(s.sigs) }()
	defer signal.Stop(s.chld)

	reaperDone := make(chan struct{})
	stopReaper := make(chan struct{})
	go func() {
		defer close(reaperDone)
		s.reapLoop(stopReaper)
	}()
	defer func() { close(stopReaper); <-reaperDone }()

	var g run.Group
	g.Add(s.childActor, func(err error) {
		// Another actor ended the run (or the child did, and this is a
		// no-op): stop the child as a SIGTERM to tether would.
		s.forward(syscall.SIGTERM)
		s.requestStop(fmt.Sprintf("run ended: %v", err))
	})
	// The signal actor outlives the interrupt: until the child is gone, a
	// second TERM/INT must still kill it at once.
	g.Add(func() error { return s.signalActor(ctx, s.childDone) }, func(error) {})
	for _, a := range s.cfg.Actors {
		a := a
		g.Add(func() error {
			err := a.Execute()
			if err != nil {
				return fmt.Errorf("%s: %w", a.Name, err)
			}
			return nil
		}, a.Interrupt)
	}
	groupErr := g.Run()
	drainCtx, cancelDrain := context.WithTimeout(context.Background(), stdioDrainWait)
	for _, c := range s.copies {
		c.wait(drainCtx.Done())
	}
	cancelDrain()

	st := s.childStatus()
	if s.ownErr != nil {
		groupErr = errors.Join(groupErr, s.ownErr)
	}
	if s.cfg.AfterChild == nil {
		return st, groupErr
	}

	// The drain must not be cut short by a repeated docker stop: keep the
	// signals caught (the default action of TERM would kill tether) and log them.
	afterDone := make(chan struct{})
	go func() {
		for {
			select {
			case sig := <-s.sigs:
				s.log.Info("signal received after the child ended; finishing the drain", "signal", sigName(sig))
			case <-afterDone:
				return
			}
		}
	}()
	afterErr := s.cfg.AfterChild(ctx, st)
	close(afterDone)
	if afterErr != nil {
		afterErr = fmt.Errorf("after the child: %w", afterErr)
	}
	return st, errors.Join(groupErr, afterErr)
}

// childStatus converts the main child's wait status into tether's exit status.
func (s *supervisor) childStatus() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.startStatus != nil {
		return *s.startStatus
	}
	if !s.reaped {
		// Still there KillWait after its SIGKILL (uninterruptible sleep).
		return Status{Code: 128 + int(syscall.SIGKILL), Signal: syscall.SIGKILL,
			Err: fmt.Errorf("child %d did not exit within %s of SIGKILL", s.pid, KillWait)}
	}
	return StatusOf(s.status)
}

// ExitCodeOwnError is the exit status of a child tether could not run (or
// whose end it could not read): 125, as docker run and podman use it, so it
// does not collide with a child's own 126, 127 or 128+N.
const ExitCodeOwnError = 125

// StatusOf is the Status of a wait status: the exit code, or 128+N for a
// child that died of signal N, as a shell reports it.
func StatusOf(ws syscall.WaitStatus) Status {
	switch {
	case ws.Exited():
		return Status{Code: ws.ExitStatus()}
	case ws.Signaled():
		return Status{Code: 128 + int(ws.Signal()), Signal: ws.Signal()}
	}
	return Status{Code: ExitCodeOwnError, Err: fmt.Errorf("unexpected wait status %#x", uint32(ws))}
}

// childActor starts the child and returns once it and its process group are
// gone, escalating from TERM to KILL as the stop and kill requests say.
func (s *supervisor) childActor() error {
	defer close(s.childDone)
	if err := s.start(); err != nil {
		s.log.Error("cannot start the child", "command", s.cfg.Command, "err", err)
		return nil // recorded in startStatus; the child "ended" at once
	}
	s.log.Debug("child started", "pid", s.pid, "command", s.cfg.Command)

	var (
		exited   = s.exited
		stopReq  = s.stopReq
		killReq  = s.killReq
		grace    <-chan time.Time
		killWait <-chan time.Time
	)
	startGrace := func() {
		if grace == nil && killWait == nil {
			grace = time.After(s.cfg.Grace)
		}
	}
	kill := func(why string) {
		if killWait != nil {
			return
		}
		s.log.Info("killing the child's process group", "pgid", s.pid, "reason", why)
		s.signalGroup(syscall.SIGKILL)
		grace, stopReq, killReq = nil, nil, nil
		killWait = time.After(KillWait)
	}
	for {
		select {
		case <-stopReq:
			stopReq = nil
			startGrace()
		case <-killReq:
			killReq = nil
			kill("second SIGTERM/SIGINT")
		case <-grace:
			grace = nil
			kill(fmt.Sprintf("grace of %s passed", s.cfg.Grace))
		case <-exited:
			exited = nil
			s.mu.Lock()
			left := !s.groupGone
			st := StatusOf(s.status)
			s.mu.Unlock()
			s.log.Debug("child exited", "pid", s.pid, "code", st.Code)
			if left {
				s.log.Info("child exited; stopping what is left of its process group", "pgid", s.pid, "grace", s.cfg.Grace)
				s.signalGroup(syscall.SIGTERM)
				startGrace()
			}
		case <-s.groupEmpty:
			s.term.restore(s.log)
			return nil
		case <-killWait:
			s.log.Warn("process group still not gone after SIGKILL; going on", "pgid", s.pid, "waited", KillWait)
			s.term.restore(s.log)
			return nil
		}
	}
}

// requestStop starts the grace period: the child was asked to stop.
func (s *supervisor) requestStop(why string) {
	s.stopOnce.Do(func() {
		s.log.Debug("stop requested", "reason", why)
		close(s.stopReq)
	})
}

// requestKill kills the group at once.
func (s *supervisor) requestKill() {
	s.killOnce.Do(func() { close(s.killReq) })
}

// signalActor forwards signals until the child actor is done. The first
// TERM/INT (or the end of ctx) starts the grace period, the second kills the
// group at once.
func (s *supervisor) signalActor(ctx context.Context, stop <-chan struct{}) error {
	done := ctx.Done()
	stops := 0
	for {
		select {
		case <-stop:
			return nil
		case <-done:
			done = nil
			s.log.Info("context ended; stopping the child", "grace", s.cfg.Grace)
			s.forward(syscall.SIGTERM)
			stops++
			s.requestStop("context ended")
		case sig := <-s.sigs:
			ssig, ok := sig.(syscall.Signal)
			if !ok {
				continue
			}
			if s.term.handle(s, ssig) {
				continue
			}
			if !s.term.fromTerminal(ssig) {
				s.forward(ssig)
			}
			if ssig == syscall.SIGTERM || ssig == syscall.SIGINT {
				stops++
				if stops == 1 {
					s.log.Info("stopping the child", "signal", sigName(ssig), "grace", s.cfg.Grace)
					s.requestStop(sigName(ssig))
				} else {
					s.requestKill()
				}
			}
		}
	}
}

// forward sends sig to the child's process group, or to the child alone
// with SignalChildOnly.
func (s *supervisor) forward(sig syscall.Signal) {
	s.log.Debug("forwarding signal", "signal", sigName(sig))
	if s.cfg.SignalChildOnly {
		s.signalChild(sig)
		return
	}
	s.signalGroup(sig)
}

// signalGroup signals every process in the child's group, unless the group
// is known to be gone (its id could belong to someone else by now).
func (s *supervisor) signalGroup(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pid == 0 || s.groupGone {
		return
	}
	if s.term.sharesGroup() {
		s.signalMembers(sig)
		return
	}
	if err := syscall.Kill(-s.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		s.log.Warn("cannot signal the child's process group", "signal", sigName(sig), "err", err)
	}
}

// signalMembers signals, one by one, the child's group when it shares
// tether's (see terminal). Unlike kill(-pgid), that is not atomic: a member
// may fork meanwhile, so a SIGKILL is repeated for members not seen before,
// a few rounds.
func (s *supervisor) signalMembers(sig syscall.Signal) {
	rounds := 1
	if sig == syscall.SIGKILL {
		rounds = killRounds
	}
	sent := map[int]bool{}
	for r := 0; r < rounds; r++ {
		fresh := 0
		for _, pid := range groupMembers(s.term.pgrp, os.Getpid()) {
			if sent[pid] {
				continue
			}
			sent[pid], fresh = true, fresh+1
			if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
				s.log.Warn("cannot signal a process of the child's group", "pid", pid, "signal", sigName(sig), "err", err)
			}
		}
		if fresh == 0 {
			return
		}
	}
}

// killRounds bounds the rounds of signalMembers' SIGKILL.
const killRounds = 3

// signalChild signals the main child alone, unless it has been reaped.
func (s *supervisor) signalChild(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pid == 0 || s.reaped {
		return
	}
	if err := syscall.Kill(s.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		s.log.Warn("cannot signal the child", "signal", sigName(sig), "err", err)
	}
}

// childEnv is os.Environ() with extra appended; for a repeated key the last
// value wins, as it would in a shell (getenv in C returns the first one).
func childEnv(extra []string) []string {
	env := append(os.Environ(), extra...)
	last := make(map[string]int, len(env))
	for i, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		last[k] = i
	}
	out := make([]string, 0, len(last))
	for i, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if last[k] == i {
			out = append(out, kv)
		}
	}
	return out
}

func sigName(sig os.Signal) string {
	if s, ok := sig.(syscall.Signal); ok {
		if n := signalName(s); n != "" {
			return n
		}
		return fmt.Sprintf("signal %d", int(s))
	}
	return sig.String()
}
