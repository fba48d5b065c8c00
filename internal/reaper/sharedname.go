package reaper

// Finding a never-observed intent's sandbox by name where several
// sandboxes may share one name (provider.NameSharer: E2B forks carry their
// parent's): the look-up, the pick among them, and the lock on the name.

import (
	"context"
	"fmt"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/provider"
)

// byName is the sandbox a never-observed intent's name finds: lookUpName's
// provider call, made as one call of prio (it holds a slot of the drain's
// concurrency), then pickNamed, which may read the journal, outside it.
func (r *Reaper) byName(ctx context.Context, p provider.Provider, in intent.Intent, prio int, what string) (provider.Sandbox, error) {
	var all []provider.Sandbox
	shared := false
	err := r.call(ctx, p, prio, provider.CallRead, what, func(ctx context.Context) (err error) {
		all, shared, err = lookUpName(ctx, p, in.Name)
		return err
	})
	if err != nil {
		return provider.Sandbox{}, err
	}
	return r.pickNamed(in, all, shared)
}

// lookUpName is every sandbox under name, and whether the provider lets
// several share a name (provider.NameSharer: E2B forks carry their
// parent's metadata); else the one GetByName finds.
func lookUpName(ctx context.Context, p provider.Provider, name string) ([]provider.Sandbox, bool, error) {
	ns, ok := p.(provider.NameSharer)
	if !ok {
		sb, err := p.GetByName(ctx, name)
		if err != nil {
			return nil, false, err
		}
		return []provider.Sandbox{sb}, false, nil
	}
	all, err := ns.Named(ctx, name)
	if err == nil && len(all) == 0 {
		err = fmt.Errorf("look up name %s: %w", name, provider.ErrNotFound)
	}
	return all, true, err
}

// pickNamed is in's sandbox among all, those under its name. Where one
// name may be carried by several sandboxes (shared; the proxy journals
// each fork as an intent of the parent's name), it is the first started of
// them that no other intent holds and that is the intent's by every label;
// failing that, the first one no other intent holds (mismatch then says
// why it is not ours). Every intent of a fork whose answer was lost thus
// finds a sandbox of its own, and a parent's sandbox is never taken for a
// fork's.
func (r *Reaper) pickNamed(in intent.Intent, all []provider.Sandbox, shared bool) (provider.Sandbox, error) {
	if !shared || (len(all) == 1 && in.ParentIntent == "") {
		// The name is this intent's own (tether-<id>, or the runner's):
		// its one sandbox is its own, or a fork of it that outlived it,
		// ours either way. The journal is not read, so that a replay of
		// many lost creates costs no scan of it per create.
		return all[0], nil
	}
	held, mine, err := r.held(in)
	if err != nil {
		return provider.Sandbox{}, err
	}
	var free []provider.Sandbox
	for _, sb := range all {
		if sb.ID == mine {
			// A proxy's answer proved it this intent's before its id
			// reached the journal.
			return sb, nil
		}
		if !held[sb.ID] {
			free = append(free, sb)
		}
	}
	for _, sb := range free {
		if mismatch(in, sb) == "" {
			return sb, nil
		}
	}
	if len(free) > 0 {
		return free[0], nil
	}
	return provider.Sandbox{}, fmt.Errorf("look up name %s: %d sandboxes carry it, each another intent's: %w", in.Name, len(all), provider.ErrNotFound)
}

// nameLock serialises, where names are shared, the steps that give one of
// the sandboxes under in's name to in (a look-up and its observe, an
// adoption), so that two intents of one name never take the same one.
func (r *Reaper) nameLock(ctx context.Context, p provider.Provider, in intent.Intent) (unlock func(), err error) {
	if _, ok := p.(provider.NameSharer); !ok {
		return func() {}, nil
	}
	// Not an intent id ([a-z0-9_-]), so never one of their locks.
	return r.lock(ctx, "name\x00"+in.Account+"\x00"+in.Name)
}

// held is the sandbox ids other intents hold under in's name: the
// observed id of every other live intent of that name and account, the
// parent intent's whatever its state (a parent released as kept keeps its
// sandbox), and those a read or a proxy's answer proved another intent's.
// mine is the id proved in's own, if any.
func (r *Reaper) held(in intent.Intent) (held map[string]bool, mine string, err error) {
	live, err := r.Journal.Live()
	if err != nil {
		return nil, "", fmt.Errorf("%w: read the live intents: %w", ErrJournal, err)
	}
	held = make(map[string]bool)
	for _, o := range live {
		if o.ID != in.ID && o.SandboxID != "" && o.Name == in.Name && o.Account == in.Account {
			held[o.SandboxID] = true
		}
	}
	if in.ParentIntent != "" {
		if parent, err := r.Journal.Get(in.ParentIntent); err == nil && parent.SandboxID != "" {
			held[parent.SandboxID] = true
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, sb := range r.verified {
		if id != in.ID {
			held[sb] = true
		}
	}
	return held, r.verified[in.ID], nil
}
