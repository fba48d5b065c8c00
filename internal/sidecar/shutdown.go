package sidecar

import (
	"context"
	"time"
)

// Shutdown, in the order oklog/run runs it: the child is gone, every
// actor's interrupt is called, one after another, then the drain runs. An
// interrupt that waited (for the intent API's requests, for the spool
// intake's last scan) would push the drain back by as much, outside its
// deadline, and `--grace + --drain-timeout` would not be the bound docker
// stop is promised. So each interrupt only signals, each Execute returns at
// once, and what is still finishing is waited for by settle, at the start
// of the drain and under its deadline.

// settling is what settle waits for: each is closed when one actor's work
// has finished after its interrupt.
type settling struct {
	name string
	done <-chan struct{}
}

// settle waits until every actor's work has finished — the intent API's
// requests in flight, the spool intake's last scan (the files the child
// renamed in before it exited reach the journal), the boot replay — or
// until ctx (the drain's deadline) ends. Then cut ends what is still
// running, so that it stops before tether exits.
func (sc *Sidecar) settle(ctx context.Context, cut func()) {
	start := time.Now()
	for _, s := range sc.settling {
		select {
		case <-s.done:
		case <-ctx.Done():
			sc.log.Warn("drain: deadline reached while waiting for the "+s.name+" to finish; going on", "waited", time.Since(start).Round(time.Millisecond))
			cut()
			return
		}
	}
	sc.log.Debug("drain: intent API, spool intake and replay finished", "elapsed", time.Since(start).Round(time.Millisecond))
}
