package reaper

// The keep label on a sandbox tether hands back or stops on purpose, so
// that no sweep deletes it.

import (
	"context"
	"fmt"
	"maps"

	"github.com/tether-run/tether/provider"
)

// markKeep labels sb, a sandbox tether hands back to its runner (released
// as kept, in lease mode or not) or stops on purpose (on_drain stop),
// provider.LabelKeep=true, so that no `tether sweep` deletes it once it is
// old and idle: the sweep works without a journal, and the label is all it
// can tell such a sandbox by. A sandbox that says keep already, or a
// provider without labels, is left as it is. The labels are replaced whole
// (Daytona has no other call): those sb was read with, plus the keep.
func (r *Reaper) markKeep(ctx context.Context, p provider.Provider, sb provider.Sandbox) error {
	if provider.KeepValue(sb.Labels[provider.LabelKeep]) {
		return nil
	}
	l, ok := p.(provider.Labeler)
	if !ok {
		return nil
	}
	labels := maps.Clone(sb.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[provider.LabelKeep] = "true"
	return r.call(ctx, p, prioDestroy, provider.CallSetter, "label "+sb.ID+" "+provider.LabelKeep, func(ctx context.Context) error {
		return l.SetLabels(ctx, sb.ID, labels)
	})
}

// markStopped is markKeep for a sandbox the drain stops on purpose
// (on_drain stop), before its stop and again once it is seen stopped. Only
// the second counts: a transient failure then is returned, so the drain
// reads and tries again; any other is said, not fatal, since the stop is
// what the drain is for.
func (r *Reaper) markStopped(ctx context.Context, p provider.Provider, sb provider.Sandbox, confirmed bool) error {
	err := r.markKeep(ctx, p, sb)
	switch {
	case err == nil || !confirmed:
		return nil
	case provider.Retryable(err) && ctx.Err() == nil:
		return fmt.Errorf("label the stopped sandbox %s %s=true: %w", sb.ID, provider.LabelKeep, err)
	}
	r.log().Warn("drain: a sandbox stopped on purpose is not labelled "+provider.LabelKeep+"=true; a tether sweep may delete it once it is old and idle",
		"sandbox", sb.ID, "name", sb.Name, "err", err)
	return nil
}
