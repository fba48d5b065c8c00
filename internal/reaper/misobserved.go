package reaper

import (
	"context"
	"errors"
	"fmt"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/provider"
)

// A runner reports the sandbox id it got from its create; a runner can get
// it wrong (a typo, two ids swapped, the id of a retried create that
// failed). A read by that id then says nothing about the intent's sandbox:
// a 404 is not proof it is gone, and another sandbox under the id does not
// make the intent foreign, while a sandbox with the intent's exact name and
// every one of its labels runs. Before either conclusion the reaper looks
// the name up; a sandbox there that is verifiably the intent's replaces the
// wrong id in the journal (journal.Journal.ReplaceObserved) and is resolved
// like any other. The auto-stop backstop, the first read of an id just
// observed, makes the same correction at once (correctObserved).

// ErrMisobserved: the observed id and the sandbox under the intent's name
// disagree in a way one more read may settle (the id answered 404 while the
// name lookup answers with that very id). The intent stays live.
var ErrMisobserved = errors.New("the observed id and the intent's name disagree")

// observedAbsent is the step after the intent's observed id answered 404.
//
// accepted says this Resolve saw Daytona accept its own delete of the
// intent's sandbox: then the 404 is the end of that delete and needs no
// lookup. Otherwise — a releasing intent included, since its delete may
// never have been sent or accepted (a drain cut short, tether killed
// before the call), or may be an earlier run's still under way — the 404
// is proof only when the name holds nothing of ours and the list does not
// show the observed id (unlisted): Daytona's access guard answers 404 for
// any error it meets, and it renames a sandbox the moment it accepts its
// deletion, so a delete under way leaves nothing under the name either.
func (r *Reaper) observedAbsent(ctx context.Context, p provider.Provider, in intent.Intent, accepted bool) (intent.Intent, error) {
	if accepted {
		return r.finish(in, intent.Gone)
	}
	return r.withUnderName(ctx, p, in, func(sb provider.Sandbox, ours bool) (intent.Intent, error) {
		switch {
		case !ours:
			return r.unlisted(ctx, p, in)
		case sb.ID == in.SandboxID:
			// One read says 404, the other finds it: a lagging replica, or
			// a hiccup. Read again rather than conclude either way.
			return in, fmt.Errorf("%w: sandbox %s answered 404 by id but is found by its name %s", ErrMisobserved, sb.ID, in.Name)
		}
		return r.adopt(in, sb, "answered 404")
	})
}

// unlisted closes as gone an intent whose observed id answered 404 and
// whose name holds nothing of ours, unless the provider's list, filtered by
// the intent's label, still shows that id. On Daytona the list is evidence
// independent of the 404: GET /sandbox has no access guard to turn an error
// into 404 (sandbox.controller.ts:130-146; the read by id has one,
// :358-382), and it shows every sandbox not yet destroyed
// (sandbox-typeorm-search.adapter.ts:100-131,
// sandbox-opensearch-search.adapter.ts:156-189), a destroying one under
// its DESTROYED_ name with its labels kept (sandbox.entity.ts:317-323) —
// all at v0.190.0. A sandbox still listed is still being destroyed, or the
// 404s were the guard's: the next read tells which.
func (r *Reaper) unlisted(ctx context.Context, p provider.Provider, in intent.Intent) (intent.Intent, error) {
	sb, listed, err := r.listed(ctx, p, in)
	switch {
	case err != nil:
		return in, err
	case listed:
		return in, fmt.Errorf("%w: sandbox %s answered 404 by id but is still listed (%s, %s)", ErrInProgress, sb.ID, sb.Name, sb.State)
	}
	return r.finish(in, intent.Gone)
}

// listed reports whether the provider lists in's observed sandbox among
// those labelled with the intent's id, or, for a fork, with its parent's:
// a fork carries its parent's labels until tether relabels it.
func (r *Reaper) listed(ctx context.Context, p provider.Provider, in intent.Intent) (provider.Sandbox, bool, error) {
	ids := []string{in.ID}
	if in.ParentIntent != "" {
		ids = append(ids, in.ParentIntent)
	}
	for _, id := range ids {
		var items []provider.Sandbox
		err := r.call(ctx, p, prioRead, provider.CallRead, "list sandboxes labelled "+intent.LabelIntent+"="+id+" (observed id "+in.SandboxID+" answered 404)", func(ctx context.Context) (err error) {
			items, err = p.List(ctx, map[string]string{intent.LabelIntent: id})
			return err
		})
		if err != nil {
			return provider.Sandbox{}, false, err
		}
		for _, sb := range items {
			if sb.ID == in.SandboxID && !sb.Gone() {
				return sb, true, nil
			}
		}
	}
	return provider.Sandbox{}, false, nil
}

// observedNotOurs is the step after a read by the intent's observed id
// found a sandbox that is not the intent's (why says how it differs). That
// sandbox is never touched; the intent closes as foreign unless its own
// sandbox is found under its name.
func (r *Reaper) observedNotOurs(ctx context.Context, p provider.Provider, in intent.Intent, by provider.Sandbox, why string) (intent.Intent, error) {
	return r.withUnderName(ctx, p, in, func(sb provider.Sandbox, ours bool) (intent.Intent, error) {
		if !ours || sb.ID == in.SandboxID {
			return r.transition(in, intent.Foreign, fmt.Sprintf("sandbox %s: %s", by.ID, why))
		}
		return r.adopt(in, sb, "is not ours ("+why+")")
	})
}

// withUnderName takes in's name lock (nameLock), reads what is under the
// name (underName) and runs then on it with the lock still held, so that
// an adoption then makes cannot take a sandbox another intent of that name
// is taking. An error of the lock or the look-up is returned as it is.
func (r *Reaper) withUnderName(ctx context.Context, p provider.Provider, in intent.Intent, then func(sb provider.Sandbox, ours bool) (intent.Intent, error)) (intent.Intent, error) {
	unlock, err := r.nameLock(ctx, p, in)
	if err != nil {
		return in, err
	}
	defer unlock()
	sb, ours, err := r.underName(ctx, p, in)
	if err != nil {
		return in, err
	}
	return then(sb, ours)
}

// underName reads the sandbox under in's exact creation name (byName: one
// no other intent holds, where names are shared) and reports whether it is
// the intent's: the name, every label, any id. A sandbox already destroyed
// is not: its absence is what a 404 claims. The caller holds nameLock.
func (r *Reaper) underName(ctx context.Context, p provider.Provider, in intent.Intent) (provider.Sandbox, bool, error) {
	sb, err := r.byName(ctx, p, in, prioRead, "look up name "+in.Name+" (observed id "+in.SandboxID+" not ours or absent)")
	if errors.Is(err, provider.ErrNotFound) {
		return provider.Sandbox{}, false, nil
	}
	if err != nil {
		return provider.Sandbox{}, false, err
	}
	if sb.Gone() || sb.Name != in.Name {
		return sb, false, nil
	}
	unobserved := in
	unobserved.SandboxID = ""
	if why := mismatch(unobserved, sb); why != "" {
		r.log().Warn("a sandbox under the intent's name is not ours", "intent", in.ID, "name", in.Name, "sandbox", sb.ID, "why", why)
		return sb, false, nil
	}
	return sb, true, nil
}

// adopt journals sb, found under the intent's name and verified, in place
// of the wrong observed id, before anything destructive; the next step reads
// and resolves it.
func (r *Reaper) adopt(in intent.Intent, sb provider.Sandbox, what string) (intent.Intent, error) {
	out, err := r.Journal.ReplaceObserved(in.ID, in.SandboxID, sb.ID)
	if err != nil {
		if cur, gerr := r.Journal.Get(in.ID); gerr == nil && (cur.SandboxID != in.SandboxID || !cur.Live()) {
			return cur, nil // changed meanwhile; go on from there
		}
		return in, fmt.Errorf("%w: replace observed id %s by %s: %w", ErrJournal, in.SandboxID, sb.ID, err)
	}
	r.log().Warn("the observed sandbox id was wrong; the sandbox under the intent's name is ours and replaces it",
		"intent", in.ID, "name", in.Name, "observed", in.SandboxID, "observed_was", what, "sandbox", sb.ID)
	return out, nil
}

// correctObserved is the backstop's remedy when the id a runner just
// observed answered 404 or names a sandbox that is not ours (err says
// which): if the intent's own sandbox is under its exact name, its id
// replaces the wrong one at once, so that the auto-stop backstop, and a
// replay after a crash, act on the right sandbox, and the runner's mistake
// is in the log while it is still running.
func (r *Reaper) correctObserved(ctx context.Context, p provider.Provider, in intent.Intent, err error) (intent.Intent, bool) {
	what := "answered 404"
	if errors.Is(err, ErrForeign) {
		what = "is not ours"
	}
	corrected := false
	out, _ := r.withUnderName(ctx, p, in, func(sb provider.Sandbox, ours bool) (intent.Intent, error) {
		if !ours || sb.ID == in.SandboxID {
			return in, nil
		}
		out, err := r.adopt(in, sb, what)
		corrected = err == nil && out.SandboxID == sb.ID
		return out, err
	})
	if !corrected {
		return in, false
	}
	return out, true
}
