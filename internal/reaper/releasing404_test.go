package reaper_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// TestTwoTransient404sOnAReleasingIntent: an intent journaled releasing
// whose delete was never sent or never accepted (a drain cut short by its
// deadline, or killed at reaper-before-delete), and a provider that answers
// two reads of its observed id with a transient 404 (Daytona's access guard
// turns any error into 404). The sandbox is still there, started, under
// its own name, never asked to be deleted: the intent must not close as
// gone. Found by the soak (docs/reliability.md): a releasing intent used to
// skip the name check a pending or observed one gets.
func TestTwoTransient404sOnAReleasingIntent(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	in := w.intent(scope, intent.DrainDelete)
	sb := w.create(in)
	in = w.observe(in, sb.ID)
	if _, err := w.j.Transition(in.ID, intent.Releasing, ""); err != nil {
		t.Fatal(err)
	}
	w.srv.Inject(daytonatest.RouteGet, 2, daytonatest.Scripted{Status: 404})
	out, err := w.resolve(in, 5*time.Second)
	if got := w.sandbox(sb.ID); out.State == intent.Gone && got.State != "destroyed" {
		t.Fatalf("intent gone (err %v) while its sandbox is %s, delete requested %v", err, got.State, got.DeleteRequested)
	}
}

// TestTransient404sWhileDestroying: an intent journaled releasing whose
// delete an earlier run sent and Daytona accepted: the sandbox is
// destroying, renamed DESTROYED_<name>_<ms>, so nothing is under the
// intent's name either. A new run's reads of the observed id answer a
// transient 404 (the access guard turns any error into 404): two in a row
// before any successful read, or one after a read that saw the rename. The
// intent must not close as gone while the simulator still destroys the
// sandbox; once the destroy ends it does, by the simulator's record.
func TestTransient404sWhileDestroying(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// fault makes some reads of the observed id answer 404.
		fault func(w *world, id string)
		// reads (by the simulator's count: those get404 answers are not
		// among them) and lists the reaper makes before the test ends its
		// run: enough to have closed the intent on the 404s if it
		// trusted them.
		reads, lists int
		// fork: the intent is a fork's, whose sandbox still carries its
		// parent's labels (tether has not relabelled it yet).
		fork bool
	}{
		{"two 404s in a row", func(w *world, id string) {
			w.srv.Inject(daytonatest.RouteGet, 2, daytonatest.Scripted{Status: 404})
		}, 3, 1, false},
		{"one 404 after a read that saw the rename", func(w *world, id string) {
			w.r.Providers = provider.NewSet(&get404{Provider: w.spy, id: id, fail: map[int]bool{2: true}})
		}, 2, 0, false},
		{"two 404s after a read that saw the rename", func(w *world, id string) {
			w.r.Providers = provider.NewSet(&get404{Provider: w.spy, id: id, fail: map[int]bool{2: true, 3: true}})
		}, 2, 1, false},
		{"two 404s in a row, a fork not relabelled yet", func(w *world, id string) {
			w.srv.Inject(daytonatest.RouteGet, 2, daytonatest.Scripted{Status: 404})
		}, 3, 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			in := w.intent(scope, intent.DrainDelete)
			sb := w.create(in)
			if tc.fork {
				parent := in
				fork, _, err := w.j.Create(context.Background(), intent.Declaration{
					Labels: scope, OnDrain: intent.DrainDelete, Provider: w.prov.Name(), Account: w.prov.Account(), ParentIntent: parent.ID,
				})
				if err != nil {
					t.Fatal(err)
				}
				in, sb = fork, w.createAs(fork.Name, parent.Labels, nil)
			}
			in = w.observe(in, sb.ID)
			// The earlier run: releasing journaled, its delete accepted, then
			// it died before any confirming read.
			if _, err := w.j.Transition(in.ID, intent.Releasing, ""); err != nil {
				t.Fatal(err)
			}
			if err := w.prov.Delete(context.Background(), sb.ID); err != nil {
				t.Fatal(err)
			}
			if err := w.srv.Hold(sb.ID, "destroying", 0); err != nil {
				t.Fatal(err)
			}
			tc.fault(w, sb.ID)
			out, err := w.resolveUntil(in, "the reads and lists", func() bool {
				return w.srv.CallsFor(sb.ID)[daytonatest.RouteGet] >= tc.reads && w.srv.Calls()[daytonatest.RouteList] >= tc.lists
			})
			if got := w.sandbox(sb.ID); out.State == intent.Gone && got.State != "destroyed" {
				t.Fatalf("intent gone (err %v) while its sandbox is %s (%s)", err, got.State, got.Name)
			}
			if err := w.srv.Release(sb.ID); err != nil {
				t.Fatal(err)
			}
			out, err = w.resolve(out, generous)
			if err != nil || out.State != intent.Gone {
				t.Fatalf("after the destroy: intent %s, err %v; want gone", out.State, err)
			}
			w.assertDestroyed(sb.ID)
			if n := len(w.spy.deleteCalls()); n != 0 {
				t.Errorf("the new run sent %d deletes; the earlier run's was accepted", n)
			}
		})
	}
}

// get404 is a provider whose Get of one sandbox id answers 404 on the
// calls numbered in fail (from 1), as Daytona's access guard does for a
// sandbox that exists; every other call goes through.
type get404 struct {
	provider.Provider
	id   string
	mu   sync.Mutex
	n    int
	fail map[int]bool
}

func (g *get404) Get(ctx context.Context, id string) (provider.Sandbox, error) {
	if id == g.id {
		g.mu.Lock()
		g.n++
		fail := g.fail[g.n]
		g.mu.Unlock()
		if fail {
			return provider.Sandbox{}, fmt.Errorf("get %s: %w", id, provider.ErrNotFound)
		}
	}
	return g.Provider.Get(ctx, id)
}
