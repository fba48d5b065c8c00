package reaper

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tether-run/tether/internal/testutil"
)

// TestGate: at most n holders; a freed slot goes to the highest priority
// waiter, first come first served among equals; a waiter that gives up
// takes no slot with it.
func TestGate(t *testing.T) {
	t.Parallel()
	g := newGate(1, 1, DefaultThrottledShare)
	ctx := context.Background()
	if err := g.acquire(ctx, prioRead); err != nil {
		t.Fatal(err)
	}
	order := make(chan string, 4)
	waitQueued := func(n int) {
		t.Helper()
		testutil.Eventually(t, fmt.Sprintf("%d waiters", n), func() (bool, string) {
			g.mu.Lock()
			k := len(g.waiting)
			g.mu.Unlock()
			return k == n, fmt.Sprintf("%d waiters", k)
		})
	}
	enqueue := func(name string, prio int) {
		go func() {
			if err := g.acquire(ctx, prio); err != nil {
				t.Error(err)
				return
			}
			order <- name
			g.release(false)
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
	if err := testutil.Receive(t, "gaveUp", gaveUp); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	waitQueued(3)

	enqueue("destroy", prioDestroy)
	waitQueued(4)
	g.release(false)
	for _, want := range []string{"destroy", "read-1", "read-2", "confirm"} {
		if got := testutil.Receive(t, "order", order); got != want {
			t.Fatalf("got %s, want %s", got, want)
		}
	}
	// The last holder releases after it reported; wait for that.
	testutil.Eventually(t, "the gate idle", func() (bool, string) {
		g.mu.Lock()
		inFlight, waiting := g.inFlight, len(g.waiting)
		g.mu.Unlock()
		return inFlight == 0 && waiting == 0, fmt.Sprintf("in flight %d, waiting %d", inFlight, waiting)
	})
}

// TestGateAIMD: a round (as many calls as the bound) with at least the
// throttled share of 429s halves the bound, down to the floor; a round
// without any adds one back, up to the ceiling; a few 429s change nothing.
func TestGateAIMD(t *testing.T) {
	t.Parallel()
	g := newGate(16, 4, 0.25)
	ctx := context.Background()
	round := func(throttled int) int {
		n := g.current()
		for i := range n {
			if err := g.acquire(ctx, prioRead); err != nil {
				t.Fatal(err)
			}
			g.release(i < throttled)
		}
		return g.current()
	}
	if got := round(1); got != 16 {
		t.Fatalf("one 429 in 16: bound %d, want 16", got)
	}
	if got := round(4); got != 8 {
		t.Fatalf("4 of 16 throttled: bound %d, want 8", got)
	}
	if got := round(8); got != 4 {
		t.Fatalf("all throttled: bound %d, want 4", got)
	}
	if got := round(4); got != 4 {
		t.Fatalf("at the floor: bound %d, want 4", got)
	}
	if got := round(0); got != 5 {
		t.Fatalf("a clean round: bound %d, want 5", got)
	}
	for range 20 {
		round(0)
	}
	if got := g.current(); got != 16 {
		t.Fatalf("after clean rounds: bound %d, want the ceiling 16", got)
	}
	// A lowered bound holds callers back: with the bound at 4, a fifth
	// waits until one of four releases.
	for g.current() > 4 {
		round(g.current())
	}
	for range 4 {
		if err := g.acquire(ctx, prioRead); err != nil {
			t.Fatal(err)
		}
	}
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if err := g.acquire(short, prioRead); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a fifth call under a bound of 4: %v, want to wait", err)
	}
}
