package reaper

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestGate: at most n holders; a freed slot goes to the highest priority
// waiter, first come first served among equals; a waiter that gives up
// takes no slot with it.
func TestGate(t *testing.T) {
	g := newGate(1)
	ctx := context.Background()
	if err := g.acquire(ctx, prioRead); err != nil {
		t.Fatal(err)
	}
	order := make(chan string, 4)
	waitQueued := func(n int) {
		deadline := time.Now().Add(20 * time.Second)
		for {
			g.mu.Lock()
			k := len(g.waiting)
			g.mu.Unlock()
			if k == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d waiters, want %d", k, n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	enqueue := func(name string, prio int) {
		go func() {
			if err := g.acquire(ctx, prio); err != nil {
				t.Error(err)
				return
			}
			order <- name
			g.release()
		}()
	}
	// Queued in this order; each waits its turn behind the holder.
	enqueue("confirm", prioConfirm)
	waitQueued(1)
	enqueue("read-1", prioRead)
	waitQueued(2)
	enqueue("read-2", prioRead)
	waitQueued(3)

	cctx, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() { gaveUp <- g.acquire(cctx, prioDestroy) }()
	waitQueued(4)
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	waitQueued(3)

	enqueue("destroy", prioDestroy)
	waitQueued(4)
	g.release()
	for _, want := range []string{"destroy", "read-1", "read-2", "confirm"} {
		if got := <-order; got != want {
			t.Fatalf("got %s, want %s", got, want)
		}
	}
	// The last holder releases after it reported; wait for that.
	deadline := time.Now().Add(20 * time.Second)
	for {
		g.mu.Lock()
		free, waiting := g.free, len(g.waiting)
		g.mu.Unlock()
		if free == 1 && waiting == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("free %d, waiting %d; want 1 and 0", free, waiting)
		}
		time.Sleep(time.Millisecond)
	}
}
