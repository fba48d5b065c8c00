package reaper

// The call gate: the bound on provider calls in flight, by priority,
// adapting under 429s.

import (
	"context"
	"sync"
)

// gate bounds the provider calls in flight. Unlike a plain semaphore it
// hands a freed slot to the waiter with the highest priority, first come
// first served among equals, so that a drain sends deletes before it reads
// more sandboxes, and reads before it confirms (see prioDestroy).
//
// Its bound adapts (AIMD): it counts the calls completed in a round (as
// many calls as the current bound) and how many of them were throttled
// (429). A round with at least `share` of them throttled halves the bound,
// down to `floor`; a round without any adds one back, up to `ceiling`. A
// provider's quota is shared with the organization's live runners: under
// sustained 429s the drain spends less of it, instead of retrying at full
// width into a spent quota. A few random 429s do not lower it.
type gate struct {
	mu       sync.Mutex
	limit    int // calls allowed in flight now
	inFlight int
	floor    int
	ceiling  int
	share    float64
	seq      uint64
	waiting  []*waiter

	roundCalls, roundThrottled int
}

type waiter struct {
	prio  int
	seq   uint64
	ready chan struct{}
}

// newGate lets n calls in flight, adapting between floor and n.
func newGate(n, floor int, share float64) *gate {
	floor = max(1, min(floor, n))
	return &gate{limit: n, ceiling: n, floor: floor, share: share}
}

// current is the bound on calls in flight now.
func (g *gate) current() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.limit
}

// acquire takes a slot, waiting for one until ctx ends.
func (g *gate) acquire(ctx context.Context, prio int) error {
	g.mu.Lock()
	if g.inFlight < g.limit && len(g.waiting) == 0 {
		g.inFlight++
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
		g.inFlight--
		g.grantLocked()
		g.mu.Unlock()
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

// release frees a slot, handing it to the best waiters the bound allows,
// and counts the call's outcome. It returns the new bound when this call
// ended a round that lowered it, else 0.
func (g *gate) release(throttled bool) (lowered int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inFlight--
	g.roundCalls++
	if throttled {
		g.roundThrottled++
	}
	if g.roundCalls >= g.limit {
		switch {
		case g.roundThrottled > 0 && float64(g.roundThrottled) >= g.share*float64(g.roundCalls):
			if next := max(g.floor, g.limit/2); next < g.limit {
				g.limit = next
				lowered = next
			}
		case g.roundThrottled == 0 && g.limit < g.ceiling:
			g.limit++
		}
		g.roundCalls, g.roundThrottled = 0, 0
	}
	g.grantLocked()
	return lowered
}

// cancel frees a slot taken for a call that was not sent.
func (g *gate) cancel() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inFlight--
	g.grantLocked()
}

// grantLocked hands free slots to the best waiters.
func (g *gate) grantLocked() {
	for g.inFlight < g.limit && len(g.waiting) > 0 {
		best := 0
		for i, w := range g.waiting[1:] {
			if b := g.waiting[best]; w.prio > b.prio || w.prio == b.prio && w.seq < b.seq {
				best = i + 1
			}
		}
		w := g.waiting[best]
		g.waiting = append(g.waiting[:best], g.waiting[best+1:]...)
		g.inFlight++
		close(w.ready)
	}
}
