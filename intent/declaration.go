package intent

import (
	"errors"
	"fmt"
	"time"
)

// Declaration is what a runner declares: the intent before the journal has
// given it its id (unless the runner chose one), name and ownership labels
// (Plan).
type Declaration struct {
	// Key makes Create idempotent: a key used before returns that intent
	// while it is live; once it has ended, the key names a new
	Key string
	// Labels are the scope and request labels (MergeLabels); Create adds
	// the ownership labels.
	Labels  map[string]string
	OnDrain OnDrain // empty means delete
	// Provider and Account are journaled with the intent for the reaper.
	Provider, Account string
	// ID, if set, is the intent id the client chose ([a-z0-9_-], e.g. in a
	// spool file written while tether was not up), so it knew the sandbox
	// name, NamePrefix+ID, in advance. The same id again returns that
	// intent while it is live and is refused once it has ended: a name is
	// never handed out twice. Empty: Create picks a ULID.
	ID string
	// Name, if set, is the creation name the runner itself chose (the
	// Daytona API proxy keeps a runner's own name and records it here,
	// since it is what finds a lost create). Empty: NamePrefix+ID.
	Name string
	// Lease is the lease in minutes when tether runs in lease mode
	// (Intent.Lease), else 0.
	Lease int
	// ParentIntent, for a fork, is the intent of the sandbox it was forked
	// from (Intent.ParentIntent); empty otherwise.
	ParentIntent string
	// Witnessed: the sandbox will be proved the intent's by the id the
	// provider's answer names, not by its name and labels
	// (Intent.Witnessed). Only a proxy sets it.
	Witnessed bool
}

// Validate checks every field a runner may set.
func (n Declaration) Validate() error {
	if err := ValidateLabels(n.Labels); err != nil {
		return err
	}
	if err := ValidateOnDrain(n.OnDrain); err != nil {
		return err
	}
	if n.Key != "" {
		if err := ValidateKey(n.Key); err != nil {
			return err
		}
	}
	if n.ID != "" {
		if err := ValidateIntentID(n.ID); err != nil {
			return err
		}
	}
	if n.Name != "" {
		if err := ValidateSandboxName(n.Name); err != nil {
			return err
		}
	}
	if n.Lease < 0 {
		return fmt.Errorf("lease %d: must not be negative", n.Lease)
	}
	if n.ParentIntent != "" {
		if err := ValidateIntentID(n.ParentIntent); err != nil {
			return fmt.Errorf("parent intent: %w", err)
		}
		if n.ParentIntent == n.ID {
			return errors.New("parent intent: an intent cannot be its own parent")
		}
	}
	return nil
}

// MergeLabels merges label sets, later ones over earlier ones: the scope
// labels of the configuration, then a request's own.
func MergeLabels(sets ...map[string]string) map[string]string {
	n := 0
	for _, s := range sets {
		n += len(s)
	}
	out := make(map[string]string, n)
	for _, s := range sets {
		for k, v := range s {
			out[k] = v
		}
	}
	return out
}

// Plan is the intent that n, declared at now in the journal of owner, is
// journaled as: its name and the labels the sandbox must carry. The journal
// builds every new intent with it, and a client that writes a spool file
// uses it to know the name and labels before tether takes the file.
func Plan(owner string, n Declaration, now time.Time) Intent {
	labels := MergeLabels(n.Labels, map[string]string{LabelOwner: owner, LabelIntent: n.ID})
	if n.OnDrain == "" {
		n.OnDrain = DrainDelete
	}
	if n.Name == "" {
		n.Name = NamePrefix + n.ID
	}
	if n.Provider == "" {
		n.Provider = DefaultProvider
	}
	return Intent{
		ID: n.ID, Name: n.Name, Labels: labels,
		Provider: n.Provider, Account: n.Account, OnDrain: n.OnDrain,
		State: Pending, Key: n.Key, Lease: n.Lease, ParentIntent: n.ParentIntent, Witnessed: n.Witnessed, CreatedAt: now, UpdatedAt: now,
	}
}

// MaxReplaced bounds the wrong sandbox ids an intent keeps (Intent.Replaced);
// past it the oldest are dropped. Each replacement needs a 404 (or a foreign
// sandbox) under the old id and a verified sandbox under the intent's name,
// so a real intent has one or two at most.
const MaxReplaced = 8

// MaxPageLimit bounds one page of intents: a page is decoded and encoded in
// memory at once, and a client that wants more pages through them.
const MaxPageLimit = 1000

// DefaultPageLimit is the page size when a query asks for paging without a limit.
const DefaultPageLimit = 100
