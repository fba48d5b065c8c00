// Package intake is what the ways into the journal share — the socket API
// (internal/api), the spool directory (internal/spooldir) and the Daytona
// API proxy: the journal itself, the scope labels and the provider and
// account every intent is declared under, and what follows a newly observed
// sandbox or a request to delete one now.
package intake

import (
	"context"
	"log/slog"

	"github.com/tether-run/tether/spool"
)

// Intake is the journal-facing half of every intake. The zero Logger
// discards.
type Intake struct {
	Journal *spool.Journal
	// Labels are the scope labels of the configuration; a request's own
	// labels are merged over them.
	Labels map[string]string
	// Provider and Account are journaled with each intent.
	Provider, Account string
	// Delete resolves one intent now: verified delete, confirmed gone. Nil
	// when tether has no provider; the intent is then left for the drain.
	Delete func(ctx context.Context, id string) (spool.Intent, error)
	// Observed is called in its own goroutine after a sandbox id was newly
	// journaled (the auto-stop backstop). May be nil.
	Observed func(spool.Intent)
	Logger   *slog.Logger
}

// NewIntent is the declaration a request makes: its labels over the scope
// labels, under this intake's provider and account.
func (in *Intake) NewIntent(labels map[string]string, onDrain spool.OnDrain, key, id string) spool.NewIntent {
	return spool.NewIntent{
		Key: key, ID: id, Labels: spool.MergeLabels(in.Labels, labels), OnDrain: onDrain,
		Provider: in.Provider, Account: in.Account,
	}
}

// Committed is called with every change an intake saw committed: a newly
// recorded sandbox id starts Observed.
func (in *Intake) Committed(c *spool.Change, result spool.Intent) {
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
