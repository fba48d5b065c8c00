// Package intake is what the ways into the journal share, and their parent
// folder: the socket API (socket), the spool directory (spooldir) and the
// providers' API proxies (daytonaproxy and e2bproxy, over the
// provider-neutral apiproxy).
// It holds the journal as the intakes see it (Journal: the few calls they
// may make), the scope labels and the provider and account every intent is
// declared under, what follows a newly observed sandbox or a request to
// delete one now, and who may use tether (Allowed, CheckDir).
package intake

import (
	"context"
	"log/slog"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/journal"
)

// Journal is the journal as an intake may use it: declare, observe,
// release and read intents, and the two state changes an intake itself
// witnesses (a create the provider refused, a delete the runner sent). The
// rest of the state machine (Transition, Note, ReplaceObserved) is the
// reaper's: it is not here, so the compiler keeps every intake from it.
// *journal.Journal implements it.
type Journal interface {
	Owner() string

	// Declaring, observing and releasing, at once or as queued changes
	// (the spool directory submits a file's change and waits for it
	// later, so many files share one commit).
	Create(ctx context.Context, n intent.Declaration) (in intent.Intent, created bool, err error)
	Observe(id, sandboxID string) (intent.Intent, error)
	Release(id, outcome string) (intent.Intent, error)
	PrepareCreate(n intent.Declaration) (*journal.Change, error)
	PrepareObserve(id, sandboxID string) (*journal.Change, error)
	PrepareRelease(id, outcome string) (*journal.Change, error)
	PrepareGet(id string) (*journal.Change, error)
	Submit(c *journal.Change) error
	Apply(ctx context.Context, c *journal.Change) (intent.Intent, error)

	// The proxies' two state changes.
	CloseRefusedCreate(id, why string) (intent.Intent, error)
	MarkDeleteRequested(id string) (intent.Intent, error)

	// Reading.
	Get(id string) (intent.Intent, error)
	Live() ([]intent.Intent, error)
	LiveCount() (int, error)
	ListPage(q journal.PageQuery) (journal.Page, error)
}

var _ Journal = (*journal.Journal)(nil)

// Intake is the journal-facing half of every intake. The zero Logger
// discards.
type Intake struct {
	Journal Journal
	// Labels are the scope labels of the configuration; a request's own
	// labels are merged over them.
	Labels map[string]string
	// Provider is what this intake declares for when a declaration names
	// none: a proxy's own provider; "" is intent.DefaultProvider (the
	// socket, the spool directory).
	Provider string
	// Accounts are the providers tether has credentials for, each with
	// its account: journaled with each intent of that provider.
	Accounts map[string]string
	// Leases are the providers in lease mode, each with its lease in
	// minutes: journaled with each intent of that provider
	// (intent.Intent.Lease).
	Leases map[string]int
	// Unavailable are the providers tether knows but has no setup for,
	// each with why: what a declaration that names one is told.
	Unavailable map[string]string
	// Delete resolves one intent now: verified delete, confirmed gone. Nil
	// when tether has no provider; the intent is then left for the drain.
	Delete func(ctx context.Context, id string) (intent.Intent, error)
	// Observed is called in its own goroutine after a sandbox id was newly
	// journaled (the auto-stop backstop). May be nil.
	Observed func(intent.Intent)
	// Declared is called once per intent this intake newly declared (not
	// for an idempotent retry): the metrics' count per intake. May be nil.
	Declared func()
	Logger   *slog.Logger
}

// ProviderName is the provider this intake declares for when a
// declaration names none.
func (in *Intake) ProviderName() string {
	if in.Provider == "" {
		return intent.DefaultProvider
	}
	return in.Provider
}

// Account is the account of this intake's provider ("" without its
// credentials).
func (in *Intake) Account() string { return in.Accounts[in.ProviderName()] }

// Lease is the lease of this intake's provider (0 outside lease mode).
func (in *Intake) Lease() int { return in.Leases[in.ProviderName()] }

// NewIntent is the declaration a request makes: its labels over the scope
// labels, under this intake's provider, its account and its lease.
func (in *Intake) NewIntent(labels map[string]string, onDrain intent.OnDrain, key, id string) intent.Declaration {
	return intent.Declaration{
		Key: key, ID: id, Labels: intent.MergeLabels(in.Labels, labels), OnDrain: onDrain,
		Provider: in.ProviderName(), Account: in.Account(), Lease: in.Lease(),
	}
}

// Declare journals n (Journal.Create) and counts it as declared through
// this intake when it made a new intent.
func (in *Intake) Declare(ctx context.Context, n intent.Declaration) (intent.Intent, bool, error) {
	i, created, err := in.Journal.Create(ctx, n)
	if err == nil && created && in.Declared != nil {
		in.Declared()
	}
	return i, created, err
}

// Committed is called with every change an intake saw committed: a newly
// created intent is counted as declared, a newly recorded sandbox id starts
// Observed.
func (in *Intake) Committed(c *journal.Change, result intent.Intent) {
	if c.Created() && in.Declared != nil {
		in.Declared()
	}
	if c.Recorded() && in.Observed != nil {
		go in.Observed(result)
	}
}

// Log is the intake's logger, never nil.
func (in *Intake) Log() *slog.Logger {
	if in.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return in.Logger
}

// RunnerDeclared reports whether a create names a live intent of this journal,
// declared over the socket or a spool file, with that intent's name and
// every one of its labels: the runner answers for that sandbox itself, so
// a proxy does not rewrite or journal it again. Any other create, one whose
// labels carry a tether owner among them (another journal's, or a copy of
// an ended intent's), is the proxy's to journal.
func (in *Intake) RunnerDeclared(labels map[string]string, name string) bool {
	if labels[intent.LabelOwner] != in.Journal.Owner() {
		return false
	}
	id := labels[intent.LabelIntent]
	if intent.ValidateIntentID(id) != nil {
		return false
	}
	it, err := in.Journal.Get(id)
	if err != nil || !it.Live() || it.Name != name {
		return false
	}
	if it.ProviderName() != in.ProviderName() {
		// Another cloud's intent (a socket declaration names none, so
		// Daytona's): the drain would look for this sandbox there.
		return false
	}
	for k, v := range it.Labels {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}
