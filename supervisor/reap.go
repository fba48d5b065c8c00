package supervisor

import (
	"errors"
	"os"
	"syscall"
	"time"
)

// reapLoop collects every child of tether (the main child, and orphans
// re-parented to tether as PID 1 or as subreaper) until stop is closed. It
// runs from before the fork until Run returns, so descendants that die during
// the drain are reaped too.
func (s *supervisor) reapLoop(stop <-chan struct{}) {
	var poll *time.Ticker
	var pollC <-chan time.Time
	defer func() {
		if poll != nil {
			poll.Stop()
		}
	}()
	for {
		stopped, waitingForGroup := s.reapPass()
		if stopped {
			s.term.childStopped(s)
		}
		switch {
		case waitingForGroup && poll == nil:
			poll = time.NewTicker(groupPollInterval)
			pollC = poll.C
		case !waitingForGroup && poll != nil:
			poll.Stop()
			poll, pollC = nil, nil
		}
		select {
		case <-s.chld:
		case <-pollC:
		case <-stop:
			return
		}
	}
}

// reapPass reaps every child that has exited so far. It reports whether the
// main child was stopped by job control (a terminal's Ctrl-Z), and whether
// the main child is gone but its process group is not.
//
// The pass holds mu, and the fork holds mu until the child's pid is
// recorded, so the main child's status is never collected unrecognised.
func (s *supervisor) reapPass() (mainStopped, waitingForGroup bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	flags := syscall.WNOHANG
	if s.term != nil {
		flags |= syscall.WUNTRACED
	}
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, flags, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			break // ECHILD: no children; 0: none has changed state
		}
		if pid != s.pid || s.pid == 0 {
			s.log.Debug("reaped an orphaned descendant", "pid", pid)
			continue
		}
		if ws.Stopped() {
			switch ws.StopSignal() {
			case syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU:
				mainStopped = true
			}
			continue
		}
		if s.reaped {
			continue
		}
		s.status, s.reaped = ws, true
		close(s.exited)
	}
	if s.reaped && !s.groupGone {
		if s.groupEmptyNow() {
			s.groupGone = true
			close(s.groupEmpty)
		}
	}
	return mainStopped, s.reaped && !s.groupGone
}

// groupEmptyNow reports whether no process is left in the child's group. A
// zombie still counts as a member, so ESRCH means every member has been
// reaped (by tether or by its own parent).
func (s *supervisor) groupEmptyNow() bool {
	if s.term.sharesGroup() {
		return len(groupMembers(s.term.pgrp, os.Getpid())) == 0
	}
	return errors.Is(syscall.Kill(-s.pid, 0), syscall.ESRCH)
}
