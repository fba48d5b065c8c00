package reaper_test

import (
	"testing"
	"time"

	"github.com/tether-run/tether/provider/daytona/daytonatest"
	"github.com/tether-run/tether/spool"
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
	in := w.intent(scope, spool.DrainDelete)
	sb := w.create(in)
	in = w.observe(in, sb.ID)
	if _, err := w.j.Transition(in.ID, spool.Releasing, ""); err != nil {
		t.Fatal(err)
	}
	w.srv.Inject(daytonatest.RouteGet, 2, daytonatest.Scripted{Status: 404})
	out, err := w.resolve(in, 5*time.Second)
	if got := w.sandbox(sb.ID); out.State == spool.Gone && got.State != "destroyed" {
		t.Fatalf("intent gone (err %v) while its sandbox is %s, delete requested %v", err, got.State, got.DeleteRequested)
	}
}
