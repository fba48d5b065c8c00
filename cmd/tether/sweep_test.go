package main

import (
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// TestSweepCommand runs the real binary against the simulator: a dry run
// that deletes nothing, then --yes; the simulator's record decides.
func TestSweepCommand(t *testing.T) {
	var offset atomic.Int64
	srv, _ := testutil.Daytona(t, daytonatest.WithClock(func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }))
	srv.AddKey("sweep-key", daytonatest.DefaultOrg)
	env := []string{"DAYTONA_API_URL=" + srv.URL, "DAYTONA_API_KEY=sweep-key", "DAYTONA_JWT_TOKEN="}

	offset.Store(int64(-3 * 24 * time.Hour))
	owned := map[string]string{intent.LabelOwner: "01owner", intent.LabelIntent: "a"}
	stale, _ := srv.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Name: "tether-stale", Labels: owned})
	keep, _ := srv.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Name: "tether-keep", Labels: map[string]string{intent.LabelOwner: "01owner", reaper.LabelKeep: "true"}})
	unowned, _ := srv.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Name: "someone-elses", Labels: map[string]string{"team": "x"}})
	offset.Store(int64(-10 * time.Minute))
	young, _ := srv.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Name: "tether-young", Labels: owned})
	offset.Store(0)

	out, errOut, code := tetherCmd(t, env, "sweep", "--older-than", "24h", "--idle-for", "1h")
	if code != 0 {
		t.Fatalf("dry run: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "DRY RUN") || !strings.Contains(out, "1 without tether-owner") || !strings.Contains(out, "4 sandboxes listed in 1 page (") {
		t.Fatalf("dry run output:\n%s", out)
	}
	rows := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 3 {
			rows[f[2]] = f[0]
		}
	}
	if rows["tether-stale"] != "delete" || rows["tether-keep"] != "keep" || rows["tether-young"] != "keep" || rows["someone-elses"] != "" {
		t.Fatalf("dry run rows %v:\n%s", rows, out)
	}
	for _, sb := range srv.Sandboxes() {
		if sb.DeleteRequested {
			t.Fatalf("the dry run deleted %s", sb.Name)
		}
	}

	out, errOut, code = tetherCmd(t, env, "sweep", "--older-than", "24h", "--idle-for", "1h", "--yes", "--json")
	var rep reaper.SweepReport
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil {
		t.Fatalf("--yes: exit %d: %s %s", code, out, errOut)
	}
	if rep.DryRun || rep.Count(reaper.SweepDeleted) != 1 {
		t.Fatalf("report: %+v", rep)
	}
	for _, c := range []struct {
		id   string
		gone bool
	}{{stale.ID, true}, {keep.ID, false}, {unowned.ID, false}, {young.ID, false}} {
		sb, _ := srv.Sandbox(c.id)
		if sb.DeleteRequested != c.gone {
			t.Errorf("%s: deleted %v, want %v", sb.Name, sb.DeleteRequested, c.gone)
		}
	}

	// A key the API refuses, and a URL that is not the API's: each says
	// what to fix, as doctor does.
	_, errOut, code = tetherCmd(t, []string{"DAYTONA_API_URL=" + srv.URL, "DAYTONA_API_KEY=wrong-key", "DAYTONA_JWT_TOKEN="}, "sweep")
	if code != exitCodeUsage || !strings.Contains(errOut, "HTTP 401") || !strings.Contains(errOut, "check DAYTONA_API_KEY") || strings.Contains(errOut, "list :") {
		t.Errorf("a wrong key: exit %d: %s; want %d saying check DAYTONA_API_KEY", code, errOut, exitCodeUsage)
	}
	_, errOut, code = tetherCmd(t, []string{"DAYTONA_API_URL=" + strings.TrimSuffix(srv.URL, "/api") + "/wrong", "DAYTONA_API_KEY=sweep-key", "DAYTONA_JWT_TOKEN="}, "sweep")
	if code != exitCodeUsage || !strings.Contains(errOut, "DAYTONA_API_URL does not look like the Daytona API") || strings.Contains(errOut, "sandbox not found") {
		t.Errorf("a wrong path: exit %d: %s; want %d saying DAYTONA_API_URL does not look like the Daytona API", code, errOut, exitCodeUsage)
	}

	// Without credentials: a clear error, exit 125.
	_, errOut, code = tetherCmd(t, []string{"DAYTONA_API_KEY=", "DAYTONA_JWT_TOKEN="}, "sweep")
	if code != exitCodeUsage || !strings.Contains(errOut, "DAYTONA_API_KEY") {
		t.Fatalf("no credentials: exit %d: %s", code, errOut)
	}
}
