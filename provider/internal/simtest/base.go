package simtest

import (
	"math/rand/v2"
	"sync"
	"time"
)

// Base is what every simulator's Server embeds: the Host it serves from,
// the lock that guards its state, the clock its sandboxes' lives follow,
// the API keys it accepts, its sandboxes (kept as R, shown to tests as S),
// the calls it counted, its random faults (F) and the answers scripted for
// the next calls (Sc). Its methods are what every simulator offers tests
// in the same words; its fields are the simulator's own, used under Mu.
type Base[R Record[S], S any, F any, Sc any] struct {
	*Host
	Mu sync.Mutex
	// Now is the clock the sandboxes' lives follow: time.Now unless a
	// test replaces it (the simulators' WithClock).
	Now func() time.Time
	// Keys maps each API key the simulator accepts to the organization
	// (or team) it acts in.
	Keys map[string]string
	// Store is every sandbox the simulator made, by id, in creation order.
	Store Store[R, S]
	// Counted are the calls, by route and by the sandbox their path names.
	Counted Calls
	// Faults are the random faults in force, drawn from Rand.
	Faults F
	Rand   *rand.Rand
	// Queued are the answers scripted for the next calls of each route.
	Queued Script[Sc]

	rules FaultRules[F, Sc]
}

// FaultRules are what Base needs to know of a simulator's fault types.
type FaultRules[F any, Sc any] struct {
	// Own returns what to keep of f, holding nothing its caller may still
	// change (a copy of its route list), and the seed of its generator.
	Own func(f F) (own F, seed int64)
	// Stream tells this simulator's generator from another's of the same
	// seed.
	Stream uint64
	// Status is the scripted answer FailNext queues: status, without
	// effect.
	Status func(status int) Sc
}

// NewBase returns the base of a healthy simulator (the zero F) that
// follows the wall clock and accepts keys. The simulator sets Host once
// its routes exist.
func NewBase[R Record[S], S any, F any, Sc any](keys map[string]string, rules FaultRules[F, Sc]) *Base[R, S, F, Sc] {
	b := &Base[R, S, F, Sc]{Now: time.Now, Keys: keys, rules: rules}
	var healthy F
	b.setFaultsLocked(healthy)
	return b
}

// Sandboxes returns every sandbox the simulator ever made, gone ones
// included, in creation order, as they are now.
func (b *Base[R, S, F, Sc]) Sandboxes() []S {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	return b.Store.Export(b.Now())
}

// Sandbox returns one sandbox by id, whatever its state.
func (b *Base[R, S, F, Sc]) Sandbox(id string) (S, bool) {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	return b.Store.ExportOne(id, b.Now())
}

// Calls returns how many requests each route received, by route name
// (the simulator's Route* constants), faulted ones included.
func (b *Base[R, S, F, Sc]) Calls() map[string]int {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	return b.Counted.ByRoute()
}

// CallsFor returns how many requests named target in their path (a
// sandbox's id, or its name where the API takes one), by route name,
// faulted ones included: what one sandbox cost its quota.
func (b *Base[R, S, F, Sc]) CallsFor(target string) map[string]int {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	return b.Counted.For(target)
}

// RemoveKey revokes a key; its calls answer 401 from then on.
func (b *Base[R, S, F, Sc]) RemoveKey(key string) {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	delete(b.Keys, key)
}

// SetFaults replaces the random faults and reseeds their generator. The
// scripted answers queued are kept.
func (b *Base[R, S, F, Sc]) SetFaults(f F) {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	b.setFaultsLocked(f)
}

func (b *Base[R, S, F, Sc]) setFaultsLocked(f F) {
	var seed int64
	b.Faults, seed = b.rules.Own(f)
	b.Rand = rand.New(rand.NewPCG(uint64(seed), b.rules.Stream))
}

// Inject queues the scripted answer f for each of the next n calls of
// route.
func (b *Base[R, S, F, Sc]) Inject(route string, n int, f Sc) {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	b.Queued.Push(route, n, f)
}

// FailNext makes the next n calls of route answer status without doing
// anything (where the simulator's Scripted says such an answer is given).
func (b *Base[R, S, F, Sc]) FailNext(route string, status, n int) {
	b.Inject(route, n, b.rules.Status(status))
}
