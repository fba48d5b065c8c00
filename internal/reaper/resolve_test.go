package reaper_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/testutil"

	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/daytona"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// generous is the deadline of a Resolve expected to finish: it ends as soon
// as the intent is terminal, so its size only matters on failure.
const generous = testutil.DrainTimeout

var scope = map[string]string{"team": "alpha", "run": "r1"}

// TestResolve is the single-intent step against the simulated Daytona API,
// through the real provider, with the real journal: one case per failure
// mode of issue 4.
func TestResolve(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		opts []daytonatest.Option
		run  func(t *testing.T, w *world)
	}{
		{"observed id deleted and confirmed", nil, func(t *testing.T, w *world) {
			in := w.intent(scope, intent.DrainDelete)
			sb := w.create(in)
			in = w.observe(in, sb.ID)
			out, err := w.resolve(in, generous)
			if err != nil || out.State != intent.Gone {
				t.Fatalf("Resolve = %s, %v; want gone", out.State, err)
			}
			w.assertDestroyed(sb.ID)
			if got := w.journaled(in.ID); got.State != intent.Gone || got.Live() {
				t.Fatalf("journal says %s", got.State)
			}
		}},

		{"never-observed name found, id journaled before the delete", nil, func(t *testing.T, w *world) {
			in := w.intent(scope, intent.DrainDelete)
			sb := w.create(in)
			var atDelete intent.Intent
			w.spy.setOnDelete(func(string) { atDelete = w.journaled(in.ID) })
			out, err := w.resolve(in, generous)
			if err != nil || out.State != intent.Gone || out.SandboxID != sb.ID {
				t.Fatalf("Resolve = %s (sandbox %q), %v; want gone with %s", out.State, out.SandboxID, err, sb.ID)
			}
			if atDelete.SandboxID != sb.ID || atDelete.State != intent.Releasing {
				t.Fatalf("when the delete was sent the journal held sandbox %q in state %s; want %s, releasing", atDelete.SandboxID, atDelete.State, sb.ID)
			}
			w.assertDestroyed(sb.ID)
		}},

		{"never-observed name absent stays unresolved, never gone", nil, func(t *testing.T, w *world) {
			in := w.intent(scope, intent.DrainDelete)
			out, err := w.resolveUntil(in, "three lookups", func() bool { return w.srv.Calls()[daytonatest.RouteGet] >= 3 })
			if !errors.Is(err, reaper.ErrNotCreated) {
				t.Fatalf("err = %v, want ErrNotCreated", err)
			}
			if out.State != intent.Pending || !w.journaled(in.ID).Live() {
				t.Fatalf("state %s, want still pending and live", out.State)
			}
			if w.srv.Calls()[daytonatest.RouteDelete] != 0 {
				t.Fatal("a delete was sent for a name that does not exist")
			}
		}},

		{"a create that lands late is found and deleted", nil, func(t *testing.T, w *world) {
			in := w.intent(scope, intent.DrainDelete)
			type result struct {
				in  intent.Intent
				err error
			}
			done := make(chan result, 1)
			go func() {
				out, err := w.resolve(in, generous)
				done <- result{out, err}
			}()
			testutil.WaitFor(t, "a lookup that finds nothing", func() bool { return w.srv.Calls()[daytonatest.RouteGet] >= 2 })
			sb := w.create(in)
			res := testutil.Receive(t, "done", done)
			if res.err != nil || res.in.State != intent.Gone || res.in.SandboxID != sb.ID {
				t.Fatalf("Resolve = %s (%q), %v; want gone with %s", res.in.State, res.in.SandboxID, res.err, sb.ID)
			}
			w.assertDestroyed(sb.ID)
		}},

		{"a name absent past the horizon closes as never-created", nil, func(t *testing.T, w *world) {
			in := w.intent(scope, intent.DrainDelete)
			w.r.NeverCreatedHorizon = time.Hour
			w.r.Now = func() time.Time { return in.CreatedAt.Add(time.Hour + time.Second) }
			out, err := w.resolve(in, generous)
			if err != nil || out.State != intent.NeverCreated {
				t.Fatalf("Resolve = %s, %v; want never-created", out.State, err)
			}
			if !strings.Contains(out.LastError, in.Name) {
				t.Errorf("last error %q does not name the intent", out.LastError)
			}
		}},

		{"observed id whose sandbox has another name is never deleted", nil, func(t *testing.T, w *world) {
			in := w.intent(scope, intent.DrainDelete)
			other := w.createAs("someone-elses-box", in.Labels, nil)
			in = w.observe(in, other.ID)
			out, err := w.resolve(in, generous)
			if err != nil || out.State != intent.Foreign {
				t.Fatalf("Resolve = %s, %v; want foreign", out.State, err)
			}
			w.assertUntouched(other.ID)
		}},

		{"wrong account never touched", nil, func(t *testing.T, w *world) {
			in := w.intent(scope, intent.DrainDelete)
			sb := w.create(in)
			in = w.observe(in, sb.ID)
			// The same simulated organization reached with another key is
			// another account for tether: it was not declared under it.
			const otherKey = "dtn_OTHER_key_of_another_account"
			w.srv.AddKey(otherKey, daytonatest.DefaultOrg)
			other := testutil.DaytonaProvider(t, w.srv, func(c *daytona.Config) { c.APIKey = otherKey })
			w.r.Providers = provider.NewSet(other)
			before := w.srv.Calls()
			out, err := w.resolve(in, generous)
			if !errors.Is(err, reaper.ErrWrongAccount) || !out.Live() {
				t.Fatalf("Resolve = %s, %v; want live with ErrWrongAccount", out.State, err)
			}
			if after := w.srv.Calls(); sum(after) != sum(before) {
				t.Fatalf("calls were made with the wrong account: %v → %v", before, after)
			}
			w.assertUntouched(sb.ID)
			if strings.Contains(err.Error(), otherKey) || strings.Contains(w.logs.String(), otherKey) {
				t.Fatal("the other key leaked")
			}
			// With the right credentials again it goes.
			w.r.Providers = provider.NewSet(w.spy)
			if out, err := w.resolve(in, generous); err != nil || out.State != intent.Gone {
				t.Fatalf("with the right account: %s, %v", out.State, err)
			}
		}},

		{"delete lost its answer: the next attempt confirms by the id's 404", nil, func(t *testing.T, w *world) {
			in := w.intent(scope, intent.DrainDelete)
			sb := w.create(in)
			in = w.observe(in, sb.ID)
			// The delete takes effect, then hangs: tether's deadline ends
			// before the answer, as when it is killed mid-drain.
			w.srv.Inject(daytonatest.RouteDelete, 1, daytonatest.Scripted{Hang: true, After: true})
			w.r.CallTimeout = time.Minute
			out, err := w.resolveUntil(in, "the delete to take effect", func() bool { return w.sandbox(sb.ID).DeleteRequested })
			if err == nil || out.State != intent.Releasing {
				t.Fatalf("first attempt: %s, %v; want releasing and an error", out.State, err)
			}
			testutil.WaitFor(t, "the simulator to finish destroying", func() bool { return w.sandbox(sb.ID).State == "destroyed" })
			deletes := w.srv.Calls()[daytonatest.RouteDelete]
			out, err = w.resolve(out, generous)
			if err != nil || out.State != intent.Gone {
				t.Fatalf("second attempt: %s, %v; want gone", out.State, err)
			}
			if w.srv.Calls()[daytonatest.RouteDelete] != deletes {
				t.Error("the second attempt deleted again instead of confirming by 404")
			}
		}},

		{"delete answer lost with a 5xx is retried and confirmed", nil, func(t *testing.T, w *world) {
			in := w.intent(scope, intent.DrainDelete)
			sb := w.create(in)
			in = w.observe(in, sb.ID)
			w.srv.Inject(daytonatest.RouteDelete, 1, daytonatest.Scripted{Status: 502, After: true})
			out, err := w.resolve(in, generous)
			if err != nil || out.State != intent.Gone {
				t.Fatalf("Resolve = %s, %v; want gone", out.State, err)
			}
			if out.Attempts < 1 {
				t.Errorf("the failed attempt was not noted: attempts %d", out.Attempts)
			}
		}},

		{"stuck destroying is not confirmed until it is gone", nil, func(t *testing.T, w *world) {
			in := w.intent(scope, intent.DrainDelete)
			sb := w.create(in)
			in = w.observe(in, sb.ID)
			// Deletes take an hour (Daytona issue #3294).
			w.srv.SetFaults(daytonatest.Faults{Destroying: time.Hour})
			var polls int
			out, err := w.resolveUntil(in, "reads of a destroying sandbox", func() bool {
				if !w.sandbox(sb.ID).DeleteRequested {
					polls = w.srv.Calls()[daytonatest.RouteGet]
					return false
				}
				return w.srv.Calls()[daytonatest.RouteGet] >= polls+3
			})
			if !errors.Is(err, reaper.ErrInProgress) || out.State != intent.Releasing {
				t.Fatalf("while destroying: %s, %v; want releasing, ErrInProgress", out.State, err)
			}
			if w.journaled(in.ID).State == intent.Gone {
				t.Fatal("journaled gone while the sandbox is still destroying")
			}
			if err := w.srv.Hold(sb.ID, "destroying", time.Millisecond); err != nil {
				t.Fatal(err)
			}
			out, err = w.resolve(out, generous)
			if err != nil || out.State != intent.Gone {
				t.Fatalf("after destroying ended: %s, %v; want gone", out.State, err)
			}
		}},

		{"409 while starting is retried until it works", nil, func(t *testing.T, w *world) {
			in := w.intent(scope, intent.DrainDelete)
			sb := w.create(in)
			in = w.observe(in, sb.ID)
			if err := w.srv.Hold(sb.ID, "starting", 0); err != nil {
				t.Fatal(err)
			}
			go func() {
				if !testutil.Poll(func() bool { return w.srv.Calls()[daytonatest.RouteDelete] >= 2 }) {
					t.Error("timed out waiting for two refused deletes")
				}
				if err := w.srv.Release(sb.ID); err != nil {
					t.Error(err)
				}
			}()
			out, err := w.resolve(in, generous)
			if err != nil || out.State != intent.Gone {
				t.Fatalf("Resolve = %s, %v; want gone", out.State, err)
			}
			var conflicts int
			for _, c := range w.spy.deleteCalls() {
				if errors.Is(c.err, provider.ErrConflict) {
					conflicts++
				}
			}
			if conflicts < 2 {
				t.Errorf("%d deletes answered 409, want at least 2", conflicts)
			}
			w.assertDestroyed(sb.ID)
		}},

		{"429 with Retry-After honoured", []daytonatest.Option{daytonatest.WithFaults(daytonatest.Faults{RetryAfter: time.Second})}, func(t *testing.T, w *world) {
			in := w.intent(scope, intent.DrainDelete)
			sb := w.create(in)
			in = w.observe(in, sb.ID)
			w.srv.FailNext(daytonatest.RouteDelete, 429, 2)
			out, err := w.resolve(in, generous)
			if err != nil || out.State != intent.Gone {
				t.Fatalf("Resolve = %s, %v; want gone", out.State, err)
			}
			calls := w.spy.deleteCalls()
			if len(calls) != 3 {
				t.Fatalf("%d deletes, want 2 refused + 1", len(calls))
			}
			for i := 1; i < len(calls); i++ {
				// A lower bound only: a slow machine can only wait longer.
				if gap := calls[i].at.Sub(calls[i-1].done); gap < time.Second {
					t.Errorf("delete %d came %s after a 429 with Retry-After: 1", i+1, gap)
				}
			}
		}},

		{"hung lookup bounded by the deadline", nil, func(t *testing.T, w *world) {
			in := w.intent(scope, intent.DrainDelete)
			w.create(in)
			w.srv.Inject(daytonatest.RouteGet, 1000, daytonatest.Scripted{Hang: true})
			w.r.CallTimeout = time.Hour
			start := time.Now()
			out, err := w.resolve(in, 500*time.Millisecond)
			if err == nil || !out.Live() {
				t.Fatalf("Resolve = %s, %v; want live with an error", out.State, err)
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("err = %v, want the deadline", err)
			}
			if took := time.Since(start); took > 15*time.Second {
				t.Errorf("took %s for a 500 ms deadline", took)
			}
		}},

		{"hung delete bounded by the deadline", nil, func(t *testing.T, w *world) {
			in := w.intent(scope, intent.DrainDelete)
			sb := w.create(in)
			in = w.observe(in, sb.ID)
			w.srv.Inject(daytonatest.RouteDelete, 1000, daytonatest.Scripted{Hang: true})
			w.r.CallTimeout = time.Hour
			out, err := w.resolveUntil(in, "the delete to hang", func() bool { return w.srv.Calls()[daytonatest.RouteDelete] >= 1 })
			if !errors.Is(err, context.Canceled) || out.State != intent.Releasing {
				t.Fatalf("Resolve = %s, %v; want releasing, ended by its context", out.State, err)
			}
			if !strings.Contains(w.journaled(in.ID).LastError, "delete") {
				t.Errorf("journal's last error %q does not say the delete hung", w.journaled(in.ID).LastError)
			}
		}},

		{"a hung call is cut by the call timeout and retried within the deadline", nil, func(t *testing.T, w *world) {
			in := w.intent(scope, intent.DrainDelete)
			sb := w.create(in)
			in = w.observe(in, sb.ID)
			w.srv.Inject(daytonatest.RouteDelete, 1, daytonatest.Scripted{Hang: true})
			w.r.CallTimeout = 200 * time.Millisecond
			out, err := w.resolve(in, generous)
			if err != nil || out.State != intent.Gone {
				t.Fatalf("Resolve = %s, %v; want gone", out.State, err)
			}
		}},

		{"unauthorized stops retrying and is reported", nil, func(t *testing.T, w *world) {
			in := w.intent(scope, intent.DrainDelete)
			sb := w.create(in)
			in = w.observe(in, sb.ID)
			w.srv.RemoveKey(apiKey)
			before := w.srv.Calls()[daytonatest.RouteGet]
			out, err := w.resolve(in, generous)
			if !errors.Is(err, provider.ErrUnauthorized) || !out.Live() {
				t.Fatalf("Resolve = %s, %v; want live, unauthorized", out.State, err)
			}
			if n := w.srv.Calls()[daytonatest.RouteGet] - before; n != 1 {
				t.Errorf("%d reads, want 1 (no retry on 401)", n)
			}
			if !strings.Contains(w.journaled(in.ID).LastError, "unauthorized") {
				t.Errorf("journal's last error: %q", w.journaled(in.ID).LastError)
			}
			if strings.Contains(err.Error(), apiKey) {
				t.Fatal("key in error")
			}
		}},

		{"on_drain=stop stops and confirms", nil, func(t *testing.T, w *world) {
			in := w.intent(scope, intent.DrainStop)
			sb := w.create(in)
			out, err := w.resolve(in, generous)
			if err != nil || out.State != intent.Stopped {
				t.Fatalf("Resolve = %s, %v; want stopped", out.State, err)
			}
			if got := w.sandbox(sb.ID); got.State != "stopped" || got.DeleteRequested {
				t.Fatalf("sandbox %s, delete requested %v", got.State, got.DeleteRequested)
			}
		}},

		{"a sandbox the runner deleted itself is confirmed gone without a delete", nil, func(t *testing.T, w *world) {
			in := w.intent(scope, intent.DrainDelete)
			sb := w.create(in)
			in = w.observe(in, sb.ID)
			if err := w.prov.Delete(context.Background(), sb.ID); err != nil {
				t.Fatal(err)
			}
			out, err := w.resolve(in, generous)
			if err != nil || out.State != intent.Gone {
				t.Fatalf("Resolve = %s, %v; want gone", out.State, err)
			}
			if len(w.spy.deleteCalls()) != 0 {
				t.Error("the reaper deleted a sandbox already destroying")
			}
		}},

		{"a sandbox destroying under its own name is confirmed, not deleted again", nil, func(t *testing.T, w *world) {
			// Destroying without Daytona's rename: what a provider whose
			// delete does not rename shows (the act's branch after the
			// rename's). Its end is waited for, with reads alone.
			in := w.intent(scope, intent.DrainDelete)
			sb := w.create(in)
			in = w.observe(in, sb.ID)
			if err := w.srv.Hold(sb.ID, "destroying", 300*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			out, err := w.resolve(in, generous)
			if err != nil || out.State != intent.Gone {
				t.Fatalf("Resolve = %s, %v; want gone", out.State, err)
			}
			if n := len(w.spy.deleteCalls()); n != 0 {
				t.Errorf("the reaper sent %d deletes of a sandbox already destroying", n)
			}
			if got := w.sandbox(sb.ID); got.State != "destroyed" || got.DeleteRequested {
				t.Errorf("sandbox %s (delete requested %v), want destroyed by its own destroy", got.State, got.DeleteRequested)
			}
		}},

		{"a released intent is left alone", nil, func(t *testing.T, w *world) {
			in := w.intent(scope, intent.DrainDelete)
			sb := w.create(in)
			if _, err := w.j.Release(in.ID, "kept"); err != nil {
				t.Fatal(err)
			}
			out, err := w.resolve(in, generous)
			if err != nil || out.State != intent.Released {
				t.Fatalf("Resolve = %s, %v; want released", out.State, err)
			}
			w.assertUntouched(sb.ID)
		}},

		{"two resolves of one intent at once", nil, func(t *testing.T, w *world) {
			in := w.intent(scope, intent.DrainDelete)
			sb := w.create(in)
			in = w.observe(in, sb.ID)
			var wg sync.WaitGroup
			errs := make([]error, 2)
			outs := make([]intent.Intent, 2)
			for i := range 2 {
				wg.Go(func() { outs[i], errs[i] = w.resolve(in, generous) })
			}
			wg.Wait()
			for i := range 2 {
				if errs[i] != nil || outs[i].State != intent.Gone {
					t.Errorf("resolve %d: %s, %v", i, outs[i].State, errs[i])
				}
			}
			if n := len(w.spy.deleteCalls()); n != 1 {
				t.Errorf("%d deletes, want 1", n)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.run(t, newWorld(t, c.opts...))
		})
	}
}

// TestOwnershipLabels: a sandbox under the intent's name (or observed id)
// that lacks or differs in any one ownership or scope label is never
// deleted, and the intent closes as foreign with the reason.
func TestOwnershipLabels(t *testing.T) {
	t.Parallel()
	for _, label := range []string{intent.LabelOwner, intent.LabelIntent, "team", "run"} {
		for _, how := range []string{"differs", "missing"} {
			for _, observed := range []bool{false, true} {
				name := label + " " + how
				if observed {
					name += ", id observed"
				} else {
					name += ", found by name"
				}
				t.Run(name, func(t *testing.T) {
					w := newWorld(t)
					in := w.intent(scope, intent.DrainDelete)
					labels := map[string]string{}
					for k, v := range in.Labels {
						labels[k] = v
					}
					if how == "missing" {
						delete(labels, label)
					} else {
						labels[label] = "not-" + labels[label]
					}
					sb := w.createAs(in.Name, labels, nil)
					if observed {
						in = w.observe(in, sb.ID)
					}
					out, err := w.resolve(in, generous)
					if err != nil || out.State != intent.Foreign {
						t.Fatalf("Resolve = %s, %v; want foreign", out.State, err)
					}
					if !strings.Contains(out.LastError, label) {
						t.Errorf("reason %q does not name label %s", out.LastError, label)
					}
					w.assertUntouched(sb.ID)
				})
			}
		}
	}
}

// TestSameScopeNeverTouchesAnother: intents of one run and of another run
// (another journal) share scope labels; resolving some of them never
// touches a sandbox that is not theirs.
func TestSameScopeNeverTouchesAnother(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	var mine, others []intent.Intent
	var mineIDs, otherIDs []string
	for i := range 8 {
		in := w.intent(scope, intent.DrainDelete)
		sb := w.create(in)
		if i%2 == 0 {
			in = w.observe(in, sb.ID)
		}
		if i < 4 {
			mine, mineIDs = append(mine, in), append(mineIDs, sb.ID)
		} else {
			others, otherIDs = append(others, in), append(otherIDs, sb.ID)
		}
	}
	// Another tether's run with the same scope labels in the same account.
	oj, err := journal.Open(t.TempDir()+"/other.db", journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer oj.Close()
	for range 3 {
		in, _, err := oj.Create(context.Background(), intent.Declaration{Labels: scope, Provider: "daytona", Account: w.prov.Account()})
		if err != nil {
			t.Fatal(err)
		}
		otherIDs = append(otherIDs, w.create(in).ID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	var wg sync.WaitGroup
	for _, in := range mine {
		wg.Go(func() {
			if out, err := w.r.Resolve(ctx, in); err != nil || out.State != intent.Gone {
				t.Errorf("%s: %s, %v", in.Name, out.State, err)
			}
		})
	}
	wg.Wait()
	for _, id := range mineIDs {
		w.assertDestroyed(id)
	}
	for _, id := range otherIDs {
		w.assertUntouched(id)
	}
	for _, in := range others {
		if got := w.journaled(in.ID); !got.Live() {
			t.Errorf("intent %s not drained was moved to %s", in.Name, got.State)
		}
	}
}

// TestBackstop: the auto-stop backstop is set on our sandbox when it is
// disabled, left alone when it is set, and never set on a foreign one.
func TestBackstop(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	zero, thirty := 0, 30

	in := w.intent(scope, intent.DrainDelete)
	labels := map[string]string{}
	for k, v := range in.Labels {
		labels[k] = v
	}
	sb := w.createAs(in.Name, labels, &zero)
	in = w.observe(in, sb.ID)
	w.srv.FailNext(daytonatest.RouteAutoStop, 409, 1) // retried
	if err := w.r.Backstop(ctx, in); err != nil {
		t.Fatal(err)
	}
	if got := w.sandbox(sb.ID).AutoStopInterval; got != 15 {
		t.Fatalf("auto-stop %d, want 15", got)
	}

	set := w.intent(scope, intent.DrainDelete)
	sb2 := w.createAs(set.Name, set.Labels, &thirty)
	set = w.observe(set, sb2.ID)
	before := w.srv.Calls()[daytonatest.RouteAutoStop]
	if err := w.r.Backstop(ctx, set); err != nil {
		t.Fatal(err)
	}
	if w.srv.Calls()[daytonatest.RouteAutoStop] != before || w.sandbox(sb2.ID).AutoStopInterval != 30 {
		t.Fatal("an auto-stop already set was changed")
	}

	foreign := w.intent(scope, intent.DrainDelete)
	sb3 := w.createAs(foreign.Name, map[string]string{intent.LabelOwner: "someone-else"}, &zero)
	foreign = w.observe(foreign, sb3.ID)
	if err := w.r.Backstop(ctx, foreign); !errors.Is(err, reaper.ErrForeign) {
		t.Fatalf("Backstop on a foreign sandbox: %v, want ErrForeign", err)
	}
	if w.sandbox(sb3.ID).AutoStopInterval != 0 {
		t.Fatal("the backstop changed a foreign sandbox")
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
