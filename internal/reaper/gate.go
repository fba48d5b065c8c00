package reaper

import (
	"context"
	"sync"
)

// gate bounds the provider calls in flight. Unlike a plain semaphore it
// hands a freed slot to the waiter with the highest priority, first come
// first served among equals, so that a drain sends deletes before it reads
// more sandboxes, and reads before it confirms (see prioDestroy).
type gate struct {
	mu      sync.Mutex
	free    int
	seq     uint64
	waiting []*waiter
}

type waiter struct {
	prio  int
	seq   uint64
	ready chan struct{}
}

func newGate(n int) *gate { return &gate{free: n} }

// acquire takes a slot, waiting for one until ctx ends.
func (g *gate) acquire(ctx context.Context, prio int) error {
	g.mu.Lock()
	if g.free > 0 && len(g.waiting) == 0 {
		g.free--
		g.mu.Unlock()
		return nil
	}
	g.seq++
	w := &waiter{prio: prio, seq: g.seq, ready: make(chan struct{})}
	g.waiting = append(g.waiting, w)
	g.mu.Unlock()

	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	g.mu.Lock()
	select {
	case <-w.ready:
		// Granted while giving up: pass the slot on.
		g.mu.Unlock()
		g.release()
	default:
		for i, o := range g.waiting {
			if o == w {
				g.waiting = append(g.waiting[:i], g.waiting[i+1:]...)
				break
			}
		}
		g.mu.Unlock()
	}
	return ctx.Err()
}

// release frees a slot, handing it to the best waiter if there is one.
func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.waiting) == 0 {
		g.free++
		return
	}
	best := 0
	for i, w := range g.waiting[1:] {
		if b := g.waiting[best]; w.prio > b.prio || w.prio == b.prio && w.seq < b.seq {
			best = i + 1
		}
	}
	w := g.waiting[best]
	g.waiting = append(g.waiting[:best], g.waiting[best+1:]...)
	close(w.ready)
}
