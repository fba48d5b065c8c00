package reaper_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/reaper"
)

// TestWrongObservedID: a runner creates the sandbox with the intent's exact
// name and labels, then observes a wrong id. The intent's sandbox must end
// destroyed in the simulator's record — never the intent "gone" while it
// runs — and a sandbox that is not ours is never touched.
func TestWrongObservedID(t *testing.T) {
	t.Parallel()
	t.Run("a mistyped id that answers 404", func(t *testing.T) {
		w := newWorld(t)
		in := w.intent(scope, intent.DrainDelete)
		sb := w.create(in)
		typo := sb.ID[:len(sb.ID)-1] + "x"
		in = w.observe(in, typo)
		out, err := w.resolve(in, generous)
		if err != nil || out.State != intent.Gone || out.SandboxID != sb.ID {
			t.Fatalf("Resolve = %s (sandbox %s), %v; want gone with %s", out.State, out.SandboxID, err, sb.ID)
		}
		w.assertDestroyed(sb.ID)
		if got := w.journaled(in.ID); !slices.Equal(got.Replaced, []string{typo}) {
			t.Fatalf("journal keeps replaced ids %v, want [%s]", got.Replaced, typo)
		}
	})

	t.Run("two intents with their ids swapped", func(t *testing.T) {
		w := newWorld(t)
		a, b := w.intent(scope, intent.DrainDelete), w.intent(scope, intent.DrainDelete)
		sa, sbb := w.create(a), w.create(b)
		a, b = w.observe(a, sbb.ID), w.observe(b, sa.ID)
		rep := func() reaper.Report {
			ctx, cancel := context.WithTimeout(context.Background(), generous)
			defer cancel()
			return w.r.Drain(ctx, []intent.Intent{a, b})
		}()
		if rep.Gone != 2 || rep.Live() != 0 || len(rep.Foreign) != 0 {
			t.Fatalf("report %+v; want both gone", rep)
		}
		w.assertDestroyed(sa.ID)
		w.assertDestroyed(sbb.ID)
		if ga, gb := w.journaled(a.ID), w.journaled(b.ID); ga.SandboxID != sa.ID || gb.SandboxID != sbb.ID {
			t.Fatalf("journal: %s → %s, %s → %s; want %s, %s", a.Name, ga.SandboxID, b.Name, gb.SandboxID, sa.ID, sbb.ID)
		}
	})

	t.Run("the id of someone else's sandbox, ours under the name", func(t *testing.T) {
		w := newWorld(t)
		in := w.intent(scope, intent.DrainDelete)
		sb := w.create(in)
		other := w.createAs("someone-elses-box", map[string]string{"team": "beta"}, nil)
		in = w.observe(in, other.ID)
		out, err := w.resolve(in, generous)
		if err != nil || out.State != intent.Gone || out.SandboxID != sb.ID {
			t.Fatalf("Resolve = %s (sandbox %s), %v; want gone with %s", out.State, out.SandboxID, err, sb.ID)
		}
		w.assertDestroyed(sb.ID)
		w.assertUntouched(other.ID)
	})

	t.Run("a 404 and, under the name, a sandbox without our labels", func(t *testing.T) {
		w := newWorld(t)
		in := w.intent(scope, intent.DrainDelete)
		labels := map[string]string{}
		for k, v := range in.Labels {
			labels[k] = v
		}
		labels["team"] = "beta" // a scope label differs: not ours
		impostor := w.createAs(in.Name, labels, nil)
		in = w.observe(in, "no-such-sandbox")
		out, err := w.resolve(in, generous)
		if err != nil || out.State != intent.Gone || out.SandboxID != "no-such-sandbox" {
			t.Fatalf("Resolve = %s (sandbox %s), %v; want gone with the observed id kept", out.State, out.SandboxID, err)
		}
		w.assertUntouched(impostor.ID)
	})

	t.Run("a 404 with nothing under the name is gone", func(t *testing.T) {
		w := newWorld(t)
		in := w.intent(scope, intent.DrainDelete)
		in = w.observe(in, "no-such-sandbox")
		out, err := w.resolve(in, generous)
		if err != nil || out.State != intent.Gone || len(out.Replaced) != 0 {
			t.Fatalf("Resolve = %+v, %v; want gone, nothing replaced", out, err)
		}
	})

	t.Run("a right id costs no name lookup", func(t *testing.T) {
		w := newWorld(t)
		in := w.intent(scope, intent.DrainDelete)
		sb := w.create(in)
		in = w.observe(in, sb.ID)
		out, err := w.resolve(in, generous)
		if err != nil || out.State != intent.Gone {
			t.Fatalf("Resolve = %s, %v; want gone", out.State, err)
		}
		w.assertDestroyed(sb.ID)
		if n := w.srv.CallsFor(in.Name); len(n) != 0 {
			t.Fatalf("the name was looked up (%v) though the observed id was right", n)
		}
	})

	t.Run("the backstop corrects the id at observe time", func(t *testing.T) {
		w := newWorld(t)
		in := w.intent(scope, intent.DrainDelete)
		zero := 0
		sb := w.createAs(in.Name, in.Labels, &zero)
		in = w.observe(in, "typo-id")
		ctx, cancel := context.WithTimeout(context.Background(), generous)
		defer cancel()
		if err := w.r.Backstop(ctx, in); err != nil {
			t.Fatal(err)
		}
		if got := w.journaled(in.ID); got.SandboxID != sb.ID || got.State != intent.Observed {
			t.Fatalf("journal: %s %s; want observed %s", got.State, got.SandboxID, sb.ID)
		}
		if got := w.sandbox(sb.ID).AutoStopInterval; got != 15 {
			t.Fatalf("auto-stop %d, want 15", got)
		}
		w.assertUntouched(sb.ID)
	})

	t.Run("concurrent resolves of one misobserved intent agree", func(t *testing.T) {
		w := newWorld(t)
		in := w.intent(scope, intent.DrainDelete)
		sb := w.create(in)
		in = w.observe(in, "typo-id")
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				if out, err := w.resolve(in, generous); err != nil || out.State != intent.Gone {
					t.Errorf("Resolve = %s, %v", out.State, err)
				}
			})
		}
		wg.Wait()
		w.assertDestroyed(sb.ID)
	})
}
