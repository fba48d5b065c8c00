package reaper_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
)

// TestDrainStopsEarlyWhenOnlyNameWaitsAreLeft: a drain whose only intent
// left waits for a name that closes as never-created after the deadline
// says what it waits for and until when, stops once NameWaitGrace has
// passed, and says why; the intent stays live. Without NameWaitGrace the
// same drain runs to its deadline (TestDrainReportsExactlyWhatIsLeft).
func TestDrainStopsEarlyWhenOnlyNameWaitsAreLeft(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.r.ProgressInterval = 20 * time.Millisecond
	w.r.NameWaitGrace = 300 * time.Millisecond
	exists := w.intent(scope, intent.DrainDelete)
	w.create(exists)
	absent := w.intent(scope, intent.DrainDelete)
	ctx, cancel := w.drainCtx(generous)
	defer cancel()
	start := time.Now()
	rep := w.r.Drain(ctx, []intent.Intent{exists, absent})
	took := time.Since(start)
	if rep.Gone != 1 || len(rep.Unresolved) != 1 || rep.Unresolved[0].ID != absent.ID {
		t.Fatalf("gone %d, unresolved %+v", rep.Gone, rep.Unresolved)
	}
	if rep.StoppedEarly == "" || !strings.Contains(rep.StoppedEarly, "never-created at") {
		t.Fatalf("stopped early: %q", rep.StoppedEarly)
	}
	if took < w.r.NameWaitGrace || took > generous/2 {
		t.Fatalf("took %s: want at least the grace %s and far less than the deadline %s", took, w.r.NameWaitGrace, generous)
	}
	logs := w.logs.String()
	for _, want := range []string{"1 intent waits for its sandbox name to appear; absent, it closes as never-created at", "drain: stopping early"} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %q", want)
		}
	}
	if live := w.live(); len(live) != 1 || live[0] != absent.ID {
		t.Fatalf("journal live %v, want the absent intent", live)
	}
	var b strings.Builder
	rep.Write(&b)
	if !strings.Contains(b.String(), "stopped early:") {
		t.Fatalf("the report does not say it stopped early:\n%s", b.String())
	}
}
