package provider

import (
	"context"
	"time"
)

// Listed is a sandbox as a sweep sees it: the Sandbox, and when it was
// last active.
type Listed struct {
	Sandbox
	// LastActivityAt is the provider's last-activity time (Daytona's
	// lastActivityAt: the last request through its proxy or toolbox, or
	// start); zero when the provider did not say.
	LastActivityAt time.Time
	// DeleteRequested: the provider has accepted a delete of this sandbox
	// (Daytona: desired state destroyed), whatever its state shows now.
	DeleteRequested bool
}

// AccountQuery selects sandboxes of the whole account.
type AccountQuery struct {
	// Labels: every pair must be among the sandbox's labels.
	Labels map[string]string
	// IncludeErroredDeleted also lists sandboxes whose delete was accepted
	// while they were in an errored state (Daytona lists them only when
	// asked: includeErroredDeleted).
	IncludeErroredDeleted bool
}

// Account is implemented by a Provider that can page through every
// sandbox of its account and read one with its last activity: what
// `tether sweep` needs, beyond what the drain uses.
type Account interface {
	// ListPage returns one page of the sandboxes q selects, starting at
	// cursor ("" for the first page), and the cursor of the next page (""
	// after the last). One call is one request, so a caller can retry a
	// page that was rate limited.
	ListPage(ctx context.Context, q AccountQuery, cursor string) (page []Listed, next string, err error)
	// Inspect reads one sandbox by id with its last activity. ErrNotFound
	// when there is none.
	Inspect(ctx context.Context, id string) (Listed, error)
}

// AccountBound is implemented by a Provider whose "not found" cannot tell
// a gone sandbox from one of another account (E2B answers 404 for another
// team's sandbox in the same words). The reaper acts on an intent of such
// a provider only when the intent carries the account it was declared
// under, and that account is the provider's: only then is a 404 "gone".
type AccountBound interface {
	// NotFoundIsPerAccount reports whether that is so (a wrapper answers
	// for what it wraps).
	NotFoundIsPerAccount() bool
}

// NeedsAccount reports whether p is AccountBound and says so.
func NeedsAccount(p Provider) bool {
	b, ok := p.(AccountBound)
	return ok && b.NotFoundIsPerAccount()
}

// SyncDeleter is implemented by a Provider whose accepted delete is done
// by the time it answers (E2B kills before it answers 204): the reaper
// reads the sandbox to confirm it gone at once, not after its
// ConfirmDelay (Daytona's asynchronous destroy).
type SyncDeleter interface {
	// DeletesSynchronously reports whether that is so (a wrapper answers
	// for what it wraps).
	DeletesSynchronously() bool
}

// DeletesSynchronously reports whether p is a SyncDeleter and says so.
func DeletesSynchronously(p Provider) bool {
	d, ok := p.(SyncDeleter)
	return ok && d.DeletesSynchronously()
}

// Restorable is implemented by a Provider on which a restore of a paused
// sandbox already in flight outlives a delete the provider accepted: E2B
// answers the DELETE of a paused sandbox being resumed 204, then 404 while
// the restore runs, and then the sandbox runs again (e2b-dev/infra#3636).
// The reaper takes a 404 there as gone only where no such restore can
// still land: after its own delete of a sandbox it read running just
// before, or once its restore window has passed since a delete of one it
// did not (reaper.Reaper.RestoreWindow).
type Restorable interface {
	// RestoresOutliveDeletes reports whether that is so (a wrapper answers
	// for what it wraps).
	RestoresOutliveDeletes() bool
}

// RestoresOutliveDeletes reports whether p is Restorable and says so.
func RestoresOutliveDeletes(p Provider) bool {
	r, ok := p.(Restorable)
	return ok && r.RestoresOutliveDeletes()
}

// CallTimer is implemented by a Provider some of whose calls take longer
// on the healthy path than a caller's usual per-call bound: a Docker
// force-remove kills the container and waits for its removal, seconds
// when dozens go at once. A caller that bounds each call (the reaper's
// CallTimeout) gives a call of that kind the longer of the two, rather
// than cut it and send it again.
type CallTimer interface {
	// CallTimeout is how long a call of kind (Call*) may take; 0 when
	// the provider has no bound of its own for it.
	CallTimeout(kind string) time.Duration
}

// CallTimeout is p's own bound for a call of kind (CallTimer), or 0.
func CallTimeout(p Provider, kind string) time.Duration {
	if t, ok := p.(CallTimer); ok {
		return t.CallTimeout(kind)
	}
	return 0
}
