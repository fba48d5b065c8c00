package simtest

import (
	"iter"
	"time"
)

// Record is one simulated sandbox as a Store keeps it. Advance applies
// what the clock says happened since the last look: states change lazily,
// whenever the simulator is asked, so that no goroutine moves a sandbox
// behind a test's back. Export is the sandbox as tests see it.
type Record[S any] interface {
	Advance(now time.Time)
	Export() S
}

// Store keeps a simulator's sandboxes by id and in the order they were
// made, gone ones included: tests judge by the fate of every sandbox ever
// made. Its owner guards it.
type Store[R Record[S], S any] struct {
	byID  map[string]R
	order []string
}

// Add keeps r, made last, under id.
func (st *Store[R, S]) Add(id string, r R) {
	if st.byID == nil {
		st.byID = map[string]R{}
	}
	st.byID[id] = r
	st.order = append(st.order, id)
}

// Get finds the sandbox id, as it was last advanced.
func (st *Store[R, S]) Get(id string) (R, bool) {
	r, ok := st.byID[id]
	return r, ok
}

// At finds the sandbox id, advanced to now.
func (st *Store[R, S]) At(id string, now time.Time) (R, bool) {
	r, ok := st.byID[id]
	if ok {
		r.Advance(now)
	}
	return r, ok
}

// All yields every sandbox in the order they were made, as they were last
// advanced.
func (st *Store[R, S]) All() iter.Seq[R] {
	return func(yield func(R) bool) {
		for _, id := range st.order {
			if !yield(st.byID[id]) {
				return
			}
		}
	}
}

// Where returns the sandboxes for which keep is true, advanced to now, in
// the order they were made.
func (st *Store[R, S]) Where(now time.Time, keep func(R) bool) []R {
	var out []R
	for r := range st.All() {
		if keep(r) {
			r.Advance(now)
			out = append(out, r)
		}
	}
	return out
}

// Export returns every sandbox, advanced to now, as tests see it, in the
// order they were made.
func (st *Store[R, S]) Export(now time.Time) []S {
	out := make([]S, 0, len(st.order))
	for r := range st.All() {
		r.Advance(now)
		out = append(out, r.Export())
	}
	return out
}

// ExportOne returns the sandbox id, advanced to now, as tests see it.
func (st *Store[R, S]) ExportOne(id string, now time.Time) (S, bool) {
	r, ok := st.At(id, now)
	if !ok {
		var zero S
		return zero, false
	}
	return r.Export(), true
}
