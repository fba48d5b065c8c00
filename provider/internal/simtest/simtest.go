// Package simtest is what the provider simulators (daytonatest, e2btest)
// share, none of it either provider's: Base, which each simulator's Server
// embeds (its host, lock, clock, keys, sandboxes, counted calls, faults and
// scripted answers, and the methods tests call on every simulator alike:
// Sandboxes, Sandbox, Calls, CallsFor, RemoveKey, SetFaults, Inject,
// FailNext, Handler, Close); the HTTP host a simulator serves from, in the
// manner of httptest.Server, which ends the requests that wait on it when
// it closes; the store of sandboxes; the count of calls by route and by
// sandbox; the queue of scripted answers; and the key=value syntax of a
// fault spec (Parse, FormatSpec). Which routes, faults and answers there are
// is each simulator's own.
package simtest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"
)

// Host serves a simulator's handler on a loopback port, or lets its
// caller serve it, and tells the requests that wait (latency, hangs, held
// calls) when the simulator closes.
type Host struct {
	handler http.Handler
	closed  chan struct{}
	once    sync.Once
	hs      *httptest.Server
}

// NewHost returns a host of handler that does not listen yet.
func NewHost(handler http.Handler) *Host {
	return &Host{handler: handler, closed: make(chan struct{})}
}

// Handler is what the host serves.
func (h *Host) Handler() http.Handler { return h.handler }

// Start serves the handler on a loopback port and returns its URL
// (http://127.0.0.1:PORT).
func (h *Host) Start() string {
	h.hs = httptest.NewServer(h.handler)
	return h.hs.URL
}

// Closed is closed once Close is called.
func (h *Host) Closed() <-chan struct{} { return h.closed }

// Close releases every request that waits on Closed, then stops serving
// (if Start did) and waits for the requests in progress.
func (h *Host) Close() {
	h.once.Do(func() { close(h.closed) })
	if h.hs != nil {
		h.hs.Close()
	}
}

// Wait sleeps d of real time; false when ctx ends or the host closes
// first.
func (h *Host) Wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-h.closed:
	}
	return false
}

// Calls counts a simulator's calls by route name, and by the sandbox id
// (or name) their path names. Its zero value is empty; its owner guards
// it.
type Calls struct {
	byRoute  map[string]int
	byTarget map[string]map[string]int
}

// Add counts one call of route, naming target ("" for none).
func (c *Calls) Add(route, target string) {
	if c.byRoute == nil {
		c.byRoute, c.byTarget = map[string]int{}, map[string]map[string]int{}
	}
	c.byRoute[route]++
	if target == "" {
		return
	}
	if c.byTarget[target] == nil {
		c.byTarget[target] = map[string]int{}
	}
	c.byTarget[target][route]++
}

// ByRoute returns a copy of the counts by route.
func (c *Calls) ByRoute() map[string]int { return copyCounts(c.byRoute) }

// For returns a copy of the counts of the calls that named target, by route.
func (c *Calls) For(target string) map[string]int { return copyCounts(c.byTarget[target]) }

func copyCounts(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Script holds the scripted answers queued for the next calls of each
// route, first in, first out. Its owner guards it.
type Script[T any] struct{ queued map[string][]T }

// Push queues v for each of the next n calls of route.
func (s *Script[T]) Push(route string, n int, v T) {
	if s.queued == nil {
		s.queued = map[string][]T{}
	}
	for range n {
		s.queued[route] = append(s.queued[route], v)
	}
}

// Pop takes the answer queued first for route, if any.
func (s *Script[T]) Pop(route string) (T, bool) {
	q := s.queued[route]
	if len(q) == 0 {
		var zero T
		return zero, false
	}
	s.queued[route] = q[1:]
	return q[0], true
}

// CopyMap returns a copy of m, empty (never nil) for a nil m: a sandbox's
// labels or metadata, which the simulator writes into.
func CopyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// DeletedByAPI prefixes what a simulator's record says deleted a sandbox
// when an API call did: "DELETE from " and the caller (Caller). tether's
// drain, replay and sweep send the User-Agent "tether", so a record tells
// tether's delete from the runner's own.
const DeletedByAPI = "DELETE from "

// Caller names the client of an API call by its User-Agent.
func Caller(r *http.Request) string {
	if ua := r.UserAgent(); ua != "" {
		return ua
	}
	return "a client with no User-Agent"
}
