package daytonaproxy

import (
	"testing"

	apiclient "github.com/daytonaio/daytona/libs/api-client-go"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// Issue 30, the questions asked of E2B asked of Daytona (daytonaio/daytona
// v0.190.0): a fork of a sandbox tether does not guard is any member of the
// organization's to make (SandboxAccessGuard compares organizations only,
// sandbox/guards/sandbox-access.guard.ts:53-61), a new sandbox carrying a
// copy of its parent's labels (sandbox.service.ts:1121-1143). Through the
// proxy it is journaled like any fork, named tether-<id>, relabelled with
// tether's own labels, and drained; the parent is untouched. (Setters and
// label replacements of a sandbox not tether's pass as sent:
// TestSettersFollowTheCreatesRule, TestLabelReplacementKeepsTethersLabels.)
func TestForkOfAnotherSandboxIsJournaledAndDrained(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	other, err := w.sim.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{
		Name: "workspace", Labels: map[string]string{"app": "ws"}, Class: daytonatest.ClassLinuxVM,
	})
	if err != nil {
		t.Fatal(err)
	}
	fork, _, err := w.runner().SandboxAPI.ForkSandbox(ctx(t), other.ID).ForkSandbox(*apiclient.NewForkSandbox()).Execute()
	if err != nil {
		t.Fatalf("fork through the proxy: %v", err)
	}
	in := w.intentOf(fork.GetId())
	if in.ParentIntent != "" || in.Name != intent.NamePrefix+in.ID {
		t.Errorf("fork intent %+v: want its own name and no parent intent", in)
	}
	rec, _ := w.sim.Sandbox(fork.GetId())
	if rec.ForkOf != other.ID || !ours(rec, in) || rec.Labels["app"] != "ws" {
		t.Errorf("the fork %+v: want tether's labels beside its parent's", rec)
	}
	testutil.Eventually(t, "the parent and the fork settle", func() (bool, string) {
		for _, id := range []string{other.ID, fork.GetId()} {
			if rec, _ := w.sim.Sandbox(id); rec.State != "started" || rec.Pending {
				return false, id + " is " + rec.State
			}
		}
		return true, ""
	})
	rep := w.drain()
	if rep.Gone != 1 || rep.Live() != 0 {
		t.Fatalf("drain: %+v", rep)
	}
	if rec, _ := w.sim.Sandbox(fork.GetId()); !rec.DeleteRequested {
		t.Errorf("the fork was left: %+v", rec)
	}
	if rec, _ := w.sim.Sandbox(other.ID); rec.DeleteRequested || rec.State != "started" || rec.Labels["app"] != "ws" || len(rec.Labels) != 1 {
		t.Errorf("the parent was touched: %+v", rec)
	}
}
