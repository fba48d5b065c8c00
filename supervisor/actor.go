package supervisor

import "sync"

// Background is an actor whose work runs in a goroutine of its own, for
// work that must not hold the group's shutdown: Execute returns when work
// returns (its error ends the run, as an actor's does) or as soon as the
// actor is interrupted; the interrupt calls stop, which tells work to
// return, and never waits for it. done is closed once work has returned,
// for whoever must wait for it later, under a deadline of its own.
func Background(name string, work func() error, stop func()) (a Actor, done <-chan struct{}) {
	finished := make(chan struct{})
	interrupted := make(chan struct{})
	var once sync.Once
	var err error
	return Actor{
		Name: name,
		Execute: func() error {
			go func() {
				err = work()
				close(finished)
			}()
			select {
			case <-finished:
				return err
			case <-interrupted:
				return nil
			}
		},
		Interrupt: func(error) {
			stop()
			once.Do(func() { close(interrupted) })
		},
	}, finished
}
