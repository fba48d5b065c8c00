package reaper

// The wait, within one drain, of a parent's delete for its forks' deletes.

import (
	"context"
	"sync"

	"github.com/tether-run/tether/intent"
)

// forkWait lets the delete of a sandbox in a drain wait until the deletes
// of its forks in the same drain were accepted (or those intents were
// resolved some other way): Daytona refuses to delete a sandbox while a
// fork's desired state is not destroyed (sandbox.service.ts:2020-2029), so
// a parent's delete sent earlier would only be refused and sent again.
// Forks are handed to the workers first (forksFirst), so a parent waiting
// never holds up a fork that no worker has taken.
type forkWait struct {
	children map[string][]string // parent intent id → its forks' intent ids in this drain
	settled  map[string]chan struct{}
	once     map[string]*sync.Once
}

type forkWaitKey struct{}

// withForkWait returns ctx carrying a forkWait for intents, or ctx itself
// when no intent of them is a fork of another.
func withForkWait(ctx context.Context, intents []intent.Intent) context.Context {
	in := make(map[string]bool, len(intents))
	for _, it := range intents {
		in[it.ID] = true
	}
	f := &forkWait{children: map[string][]string{}, settled: map[string]chan struct{}{}, once: map[string]*sync.Once{}}
	for _, it := range intents {
		if it.ParentIntent == "" || !in[it.ParentIntent] || it.ParentIntent == it.ID {
			continue
		}
		f.children[it.ParentIntent] = append(f.children[it.ParentIntent], it.ID)
		f.settled[it.ID], f.once[it.ID] = make(chan struct{}), &sync.Once{}
	}
	if len(f.children) == 0 {
		return ctx
	}
	return context.WithValue(ctx, forkWaitKey{}, f)
}

// forkSettled says that the fork id's delete was accepted, or that its
// intent is resolved as far as this drain goes.
func forkSettled(ctx context.Context, id string) {
	f, _ := ctx.Value(forkWaitKey{}).(*forkWait)
	if f == nil || f.once[id] == nil {
		return
	}
	f.once[id].Do(func() { close(f.settled[id]) })
}

// waitForks waits until every fork of intent id in this drain settled, or
// ctx ends.
func waitForks(ctx context.Context, id string) {
	f, _ := ctx.Value(forkWaitKey{}).(*forkWait)
	if f == nil {
		return
	}
	for _, child := range f.children[id] {
		select {
		case <-f.settled[child]:
		case <-ctx.Done():
			return
		}
	}
}
