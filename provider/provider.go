// Package provider is the narrow view tether has of a sandbox cloud: the few
// calls the reaper needs to find, verify, delete or stop a sandbox, the
// errors it can act on, and the optional interfaces a backend may add (a
// name several sandboxes share, an account-bound intent, a lease, labels).
// Backends live in subpackages (provider/daytona, provider/e2b); this
// package imports none of them and knows nothing of the journal.
package provider

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Sandbox is what tether needs to know of a remote sandbox to decide whether
// it owns it and whether it is gone.
type Sandbox struct {
	ID              string
	Name            string
	State           string // provider's own word: "started", "destroying", ...
	Labels          map[string]string
	AutoStopMinutes int // 0 means auto-stop is disabled
	// AutoDeleteMinutes: how long after it stops the sandbox is deleted; 0
	// at once (ephemeral), negative never. Read only by lease mode, of a
	// provider.Leaser.
	AutoDeleteMinutes int
	CreatedAt         time.Time
}

// Provider is one account of one sandbox cloud.
//
// Every call honours ctx; implementations add their own per-call timeout as
// well, so a hung request never outlives the caller's deadline.
type Provider interface {
	// Name is the provider's short name as journaled with each intent ("daytona").
	Name() string
	// Account is a fingerprint of the credentials in use (a hash of the API
	// URL and key, never the key). The reaper refuses to act on an intent
	// recorded under another account.
	Account() string
	// Get reads one sandbox by its provider id. ErrNotFound when there is none.
	Get(ctx context.Context, id string) (Sandbox, error)
	// GetByName reads one sandbox by its exact name. ErrNotFound when there is none.
	GetByName(ctx context.Context, name string) (Sandbox, error)
	// List returns the sandboxes whose labels include every given pair.
	// Lists may lag behind creates and deletes (eventual consistency).
	List(ctx context.Context, labels map[string]string) ([]Sandbox, error)
	// Delete asks for the sandbox to be deleted. Deletion may be asynchronous:
	// a nil error does not mean gone; only a later Get answering ErrNotFound does.
	Delete(ctx context.Context, id string) error
	// Stop asks for the sandbox to be stopped.
	Stop(ctx context.Context, id string) error
	// SetAutoStop sets the provider-side idle auto-stop interval in minutes.
	SetAutoStop(ctx context.Context, id string, minutes int) error
}

// NameSharer is implemented by a Provider on which several sandboxes may
// carry one name: an E2B fork carries its parent's metadata, tether's name
// for it included. GetByName then returns only one of them; the reaper
// lists them all and gives each intent of that name a sandbox no other
// intent holds.
type NameSharer interface {
	// Named returns every sandbox carrying the exact name, the first
	// started first.
	Named(ctx context.Context, name string) ([]Sandbox, error)
}

// Gone reports whether a sandbox in this state no longer exists for billing
// purposes (the provider may still list it for a while).
func (s Sandbox) Gone() bool { return s.State == StateDestroyed }

// Stopped reports whether the sandbox is stopped (or archived).
func (s Sandbox) Stopped() bool { return s.State == StateStopped || s.State == StateArchived }

// Provider-neutral state words that the reaper looks at. Backends map their
// own states onto these where they differ.
const (
	StateStarted    = "started"
	StateStopped    = "stopped"
	StateArchived   = "archived"
	StateDestroying = "destroying"
	StateDestroyed  = "destroyed"
)

// Errors a backend returns (wrapped) so the reaper can decide what to do.
var (
	// ErrNotFound: the sandbox does not exist (HTTP 404).
	ErrNotFound = errors.New("sandbox not found")
	// ErrConflict: the request clashes with the sandbox's state, e.g. a state
	// change is in progress or the name is taken (HTTP 409). Retryable for deletes.
	// Its text names no cause: the server's message, which backends add,
	// says which one it was.
	ErrConflict = errors.New("conflict")
	// ErrRateLimited: too many requests (HTTP 429). See RateLimitError.
	ErrRateLimited = errors.New("rate limited")
	// ErrUnauthorized: the credentials are wrong or lack permission (401/403). Not retryable.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrUnavailable: a transient server or network failure (5xx, reset, timeout). Retryable.
	ErrUnavailable = errors.New("provider unavailable")
	// ErrUnreachable: no connection could be made at all (refused, the
	// host does not resolve, no route). It matches ErrUnavailable too — a
	// server restarting refuses for a moment, so a drain under way retries
	// it — but a command that has done nothing yet fails fast on it rather
	// than retry a mistyped URL until its deadline. See Unreachable.
	ErrUnreachable = errors.New("provider unreachable")
	// ErrPermission: the credentials work but lack a permission the call
	// needs. A configuration error; it also matches ErrUnauthorized. See
	// PermissionError.
	ErrPermission = errors.New("missing permission")
	// ErrNotStoppable: a stop was refused because the sandbox is already
	// stopped (or archived): for a stop, that is done.
	ErrNotStoppable = errors.New("sandbox is not in a stoppable state")
	// ErrErrored: the sandbox is in an errored state; it cannot be stopped
	// (it can be deleted). Not retryable.
	ErrErrored = errors.New("sandbox is in an errored state")
	// ErrRefused: the server refused the request as it stands (HTTP 400,
	// e.g. a delete while forks of the sandbox live). Not retryable: asking
	// again gets the same answer until something else changes.
	ErrRefused = errors.New("request refused")
	// ErrHasForks: a delete was refused because sandboxes forked from this
	// one are not deleted yet (Daytona's 400 "Cannot delete sandbox which
	// has active fork children"). Retryable once the forks are gone.
	ErrHasForks = errors.New("sandbox has forks not deleted yet")
	// ErrInUse: a delete was refused because other sandboxes still use
	// this one (a Docker network with containers attached, a volume a
	// container mounts). Like ErrHasForks, the drain sends it again once
	// they are gone; retryable.
	ErrInUse = errors.New("in use by sandboxes not deleted yet")
	// ErrMisconfigured: the provider cannot be reached as configured — the
	// server's certificate is not trusted (no CA bundle, a private CA), is
	// for another host, or the URL's scheme is wrong. A configuration error
	// like ErrUnauthorized: not retryable, only a change of setup helps.
	ErrMisconfigured = errors.New("provider misconfigured")
)

// Checker is implemented by a Provider that can check its own setup with
// one cheap authenticated call (credentials, DNS, TLS), so that a broken
// setup is reported at start rather than when the drain needs it.
type Checker interface {
	// Check makes that call. Its error says what to fix; it matches
	// ErrUnauthorized or ErrMisconfigured when the setup is wrong.
	Check(ctx context.Context) error
}

// ConfigError reports whether err is a configuration error (credentials,
// permissions, certificates): retrying cannot help, and an operator must
// act.
func ConfigError(err error) bool {
	return errors.Is(err, ErrUnauthorized) || errors.Is(err, ErrMisconfigured)
}

// PermissionError says which permission the credentials lack for which
// call. It matches ErrPermission and ErrUnauthorized with errors.Is.
type PermissionError struct {
	Op         string // "delete", "stop", ...
	Permission string // the provider's name for it, e.g. "delete:sandboxes"; empty if unknown
	Message    string // the server's own words
}

func (e *PermissionError) Error() string {
	if e.Permission == "" {
		return fmt.Sprintf("configuration error: the credentials may not %s sandboxes (%s)", e.Op, e.Message)
	}
	return fmt.Sprintf("configuration error: the credentials lack the %q permission, needed to %s sandboxes (%s)", e.Permission, e.Op, e.Message)
}

func (e *PermissionError) Is(target error) bool {
	return target == ErrPermission || target == ErrUnauthorized
}

// Call kinds, for providers that know which rate limit each counts against.
const (
	CallRead   = "read"   // Get, GetByName, List
	CallDelete = "delete" // Delete
	CallStop   = "stop"   // Stop
	CallSetter = "setter" // SetAutoStop
)

// Throttled is implemented by a Provider that learns the server's rate-limit
// windows from its answers (e.g. X-RateLimit-Remaining: 0 with the time to
// the window's reset). Callers that send many calls consult it before each
// call, so they do not send one the server has already said it will refuse.
type Throttled interface {
	// ExhaustedUntil is when the quota that calls of this kind (Call*)
	// count against is known to be available again; the zero time when it
	// is not known to be exhausted.
	ExhaustedUntil(kind string) time.Time
}

// Quotas is implemented by a Throttled provider that names the server's
// limit each kind of call counts against (Daytona: its throttler; E2B:
// its route), so that a caller can tell which kinds share one: two kinds
// with the same name spend the same quota.
type Quotas interface {
	Quota(kind string) string
}

// RateLimitError carries the server's Retry-After hint. It matches ErrRateLimited with errors.Is.
type RateLimitError struct {
	RetryAfter time.Duration // zero when the server gave none
	// Limiter names the server's rate limit that refused the call, when it
	// said (Daytona: the throttler, e.g. "sandbox-lifecycle").
	Limiter string
}

func (e *RateLimitError) Error() string {
	what := "rate limited"
	if e.Limiter != "" {
		what += " by " + e.Limiter
	}
	if e.RetryAfter > 0 {
		return fmt.Sprintf("%s (retry after %s)", what, e.RetryAfter)
	}
	return what
}

func (e *RateLimitError) Is(target error) bool { return target == ErrRateLimited }

// Unreachable wraps err, a failure to connect at all, so that it matches
// both ErrUnreachable and ErrUnavailable.
func Unreachable(err error) error { return &unreachableError{err} }

type unreachableError struct{ err error }

func (e *unreachableError) Error() string { return e.err.Error() }
func (e *unreachableError) Unwrap() error { return e.err }
func (e *unreachableError) Is(target error) bool {
	return target == ErrUnreachable || target == ErrUnavailable
}

// Retryable reports whether an error from a Provider call may succeed if tried
// again. Backends wrap a per-call timeout as ErrUnavailable, so a hung call is
// retryable while the caller's own deadline is not.
func Retryable(err error) bool {
	return errors.Is(err, ErrConflict) || errors.Is(err, ErrRateLimited) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrInUse)
}
