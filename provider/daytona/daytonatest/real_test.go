package daytonatest_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	apiclient "github.com/daytonaio/daytona/libs/api-client-go"

	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// The behaviours of the real server at v0.190.0 that its spec does not
// tell, each through the real generated client and checked
// against the spec. The comments beside the simulator's code cite the
// server's source for each.

func seedIn(t *testing.T, s *daytonatest.Server, seed daytonatest.SeedSandbox) daytonatest.Sandbox {
	t.Helper()
	sb, err := s.AddSandbox(daytonatest.DefaultOrg, seed)
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

// 1. A delete renames at once; the state lags until the destroy action runs.
func TestDeleteRenamesButTheStateLags(t *testing.T) {
	clk := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := newServer(t, daytonatest.WithClock(clk.Now), daytonatest.WithDestroyLag(10*time.Second), daytonatest.WithDestroyDelay(30*time.Second))
	c := newClient(t, s, daytonatest.DefaultKey)
	for _, state := range []string{"archived", "archiving", "paused", "stopped", "started"} {
		sb := seedIn(t, s, daytonatest.SeedSandbox{Name: "lag-" + state, State: state})
		if err := s.Hold(sb.ID, state, 0); err != nil { // archiving would move on by itself
			t.Fatal(err)
		}
		got, resp, err := c.api.SandboxAPI.DeleteSandbox(c.ctx, sb.ID).Execute()
		if err != nil || status(resp) != 200 {
			t.Fatalf("%s: delete %d %v, want 200", state, status(resp), err)
		}
		if !strings.HasPrefix(got.GetName(), "DESTROYED_lag-"+state+"_") || string(got.GetState()) != state {
			t.Errorf("%s: delete answered %s in %s", state, got.GetName(), got.GetState())
		}
		clk.Add(9 * time.Second)
		got, _, err = c.api.SandboxAPI.GetSandbox(c.ctx, sb.ID).Execute()
		if err != nil || string(got.GetState()) != state || got.GetDesiredState() != apiclient.SANDBOXDESIREDSTATE_DESTROYED {
			t.Errorf("%s: 9 s after the delete GET shows %v (desired %v), %v; want the old state", state, got.GetState(), got.GetDesiredState(), err)
		}
		clk.Add(2 * time.Second)
		rec, _ := s.Sandbox(sb.ID)
		want := "destroying"
		if state == "archived" {
			want = "destroyed" // nothing on a runner to remove
		}
		if rec.State != want {
			t.Errorf("%s: after the lag the sandbox is %s, want %s", state, rec.State, want)
		}
		clk.Add(time.Minute)
		if _, resp, _ := c.api.SandboxAPI.GetSandbox(c.ctx, sb.ID).Execute(); status(resp) != 404 {
			t.Errorf("%s: GET after the destroy: %d, want 404", state, status(resp))
		}
	}
}

// The lag as a seeded fault: the same seed gives the same lags.
func TestDestroyLagIsSeeded(t *testing.T) {
	lags := func() []string {
		clk := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
		s := newServer(t, daytonatest.WithClock(clk.Now), daytonatest.WithFaults(daytonatest.Faults{Seed: 7, DestroyLag: 10 * time.Second}))
		c := newClient(t, s, daytonatest.DefaultKey)
		var ids []string
		for range 8 {
			sb := seedIn(t, s, daytonatest.SeedSandbox{State: "archived"})
			if _, _, err := c.api.SandboxAPI.DeleteSandbox(c.ctx, sb.ID).Execute(); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, sb.ID)
		}
		var out []string
		for range 10 {
			clk.Add(time.Second)
			var row []byte
			for _, id := range ids {
				rec, _ := s.Sandbox(id)
				row = append(row, rec.State[0])
			}
			out = append(out, string(row))
		}
		return out
	}
	a, b := lags(), lags()
	if strings.Join(a, " ") != strings.Join(b, " ") {
		t.Fatalf("the same seed gave other lags:\n%v\n%v", a, b)
	}
	if a[0] == a[9] {
		t.Errorf("no sandbox moved on within the 10 s: %v", a)
	}
}

// 2. 404 is not always gone.
func TestSpurious404(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s, daytonatest.DefaultKey)
	sb := c.create(t, "hiccup", nil)
	s.Inject(daytonatest.RouteGet, 1, daytonatest.Scripted{Status: 404})
	_, resp, err := c.api.SandboxAPI.GetSandbox(c.ctx, sb.GetId()).Execute()
	if status(resp) != 404 {
		t.Fatalf("injected 404: %d", status(resp))
	}
	assertErrorBody(t, body(err), 404, "/api/sandbox/"+sb.GetId())
	if !strings.Contains(body(err), "Sandbox with ID or name "+sb.GetId()+" not found") {
		t.Errorf("message %s", body(err))
	}
	if got, _, err := c.api.SandboxAPI.GetSandbox(c.ctx, sb.GetId()).Execute(); err != nil || got.GetState() != apiclient.SANDBOXSTATE_STARTED {
		t.Fatalf("the next read: %v %v", got.GetState(), err)
	}
	// Seeded: some reads of a live sandbox answer 404, the same ones per seed.
	s.SetFaults(daytonatest.Faults{Seed: 3, Rate404: 0.3})
	var n404 int
	for range 50 {
		if _, resp, _ := c.api.SandboxAPI.GetSandbox(c.ctx, sb.GetId()).Execute(); status(resp) == 404 {
			n404++
		}
	}
	if n404 == 0 || n404 == 50 {
		t.Errorf("%d of 50 reads answered 404 at a 30%% rate", n404)
	}
	if rec, _ := s.Sandbox(sb.GetId()); rec.State != "started" || rec.DeleteRequested {
		t.Errorf("the sandbox changed: %+v", rec)
	}
}

// 2b. The list is another path than the read by id: no access guard, so
// no spurious 404 (GET /sandbox is sandbox.controller.ts:130-146, without
// the SandboxAccessGuard of GET /sandbox/{id}, :358-382). It shows a
// deleted sandbox until it is destroyed, under its DESTROYED_ name with its
// labels (sandbox-typeorm-search.adapter.ts:100-131, sandbox.entity.ts:317-323).
func TestListShowsDestroyingWhereTheReadSays404(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s, daytonatest.DefaultKey)
	sb := c.create(t, "going", map[string]string{"tether-intent": "x"})
	if _, _, err := c.api.SandboxAPI.DeleteSandbox(c.ctx, sb.GetId()).Execute(); err != nil {
		t.Fatal(err)
	}
	if err := s.Hold(sb.GetId(), "destroying", 0); err != nil {
		t.Fatal(err)
	}
	s.SetFaults(daytonatest.Faults{Seed: 1, Rate404: 1})
	if _, resp, _ := c.api.SandboxAPI.GetSandbox(c.ctx, sb.GetId()).Execute(); status(resp) != 404 {
		t.Fatalf("read by id with every read faulted: %d, want 404", status(resp))
	}
	list := func() []apiclient.SandboxListItem {
		t.Helper()
		page, resp, err := c.api.SandboxAPI.ListSandboxes(c.ctx).Labels(`{"tether-intent":"x"}`).Execute()
		if err != nil || status(resp) != 200 {
			t.Fatalf("list: %d %v", status(resp), err)
		}
		return page.Items
	}
	items := list()
	if len(items) != 1 || items[0].GetId() != sb.GetId() || !strings.HasPrefix(items[0].GetName(), "DESTROYED_going_") ||
		items[0].GetState() != apiclient.SANDBOXSTATE_DESTROYING || items[0].GetDesiredState() != apiclient.SANDBOXDESIREDSTATE_DESTROYED {
		t.Fatalf("list while destroying: %+v, want the sandbox renamed, destroying", items)
	}
	if err := s.Release(sb.GetId()); err != nil {
		t.Fatal(err)
	}
	if items := list(); len(items) != 0 {
		t.Fatalf("list once destroyed: %d items, want none", len(items))
	}
}

// 3. Rate limits: per organization and throttler, with their own headers.
func TestQuotaPerThrottler(t *testing.T) {
	clk := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := newServer(t, daytonatest.WithClock(clk.Now), daytonatest.WithCreateWait(0),
		daytonatest.WithRateLimit(daytonatest.ThrottlerSandboxLifecycle, 2, time.Minute))
	c := newClient(t, s, daytonatest.DefaultKey)
	var ids []string
	for range 4 {
		ids = append(ids, seedIn(t, s, daytonatest.SeedSandbox{}).ID)
	}
	_, resp, err := c.api.SandboxAPI.DeleteSandbox(c.ctx, ids[0]).Execute()
	if err != nil || resp.Header.Get("X-RateLimit-Limit-sandbox-lifecycle") != "2" ||
		resp.Header.Get("X-RateLimit-Remaining-sandbox-lifecycle") != "1" || resp.Header.Get("X-RateLimit-Reset-sandbox-lifecycle") != "60" {
		t.Fatalf("first delete: %v, headers %v", err, resp.Header)
	}
	clk.Add(10 * time.Second)
	_, resp, _ = c.api.SandboxAPI.StopSandbox(c.ctx, ids[1]).Execute() // stop shares the counter
	if resp.Header.Get("X-RateLimit-Remaining-sandbox-lifecycle") != "0" || resp.Header.Get("X-RateLimit-Reset-sandbox-lifecycle") != "50" {
		t.Fatalf("stop: headers %v", resp.Header)
	}
	_, resp, _ = c.api.SandboxAPI.DeleteSandbox(c.ctx, ids[2]).Execute()
	if status(resp) != 429 || resp.Header.Get("Retry-After-sandbox-lifecycle") != "60" || resp.Header.Get("Retry-After") != "" {
		t.Fatalf("third lifecycle call: %d, headers %v; want 429 with Retry-After-sandbox-lifecycle only", status(resp), resp.Header)
	}
	if rec, _ := s.Sandbox(ids[2]); rec.DeleteRequested {
		t.Fatal("a refused delete took effect")
	}
	// Reads count against another throttler, which has no quota here.
	if _, resp, err := c.api.SandboxAPI.GetSandbox(c.ctx, ids[2]).Execute(); err != nil || status(resp) != 200 {
		t.Fatalf("read while lifecycle is blocked: %d %v", status(resp), err)
	}
	// Another organization has its own quota.
	s.AddKey("other-key", "org-2")
	other := newClient(t, s, "other-key")
	if _, resp, _ := other.api.SandboxAPI.DeleteSandbox(other.ctx, "nope").Execute(); status(resp) != 404 {
		t.Fatalf("other organization: %d, want 404 (not throttled)", status(resp))
	}
	clk.Add(30 * time.Second)
	_, resp, _ = c.api.SandboxAPI.DeleteSandbox(c.ctx, ids[3]).Execute()
	if status(resp) != 429 || resp.Header.Get("Retry-After-sandbox-lifecycle") != "30" {
		t.Fatalf("inside the block: %d, Retry-After-sandbox-lifecycle %q", status(resp), resp.Header.Get("Retry-After-sandbox-lifecycle"))
	}
	st := s.Throttle()
	if st.Refused[daytonatest.ThrottlerSandboxLifecycle] != 2 || st.InWindow[daytonatest.ThrottlerSandboxLifecycle] != 1 {
		t.Errorf("stats %+v: want 2 refused, 1 inside the window", st)
	}
	clk.Add(31 * time.Second)
	if _, resp, err := c.api.SandboxAPI.DeleteSandbox(c.ctx, ids[3]).Execute(); err != nil {
		t.Fatalf("after the block: %d %v", status(resp), err)
	}
}

// Only failed authentications get a plain Retry-After.
func TestFailedAuthThrottler(t *testing.T) {
	s := newServer(t, daytonatest.WithFailedAuthLimit(3, time.Minute))
	bad := newClient(t, s, "wrong-key")
	for i := 1; i <= 2; i++ {
		if _, resp, _ := bad.api.SandboxAPI.ListSandboxes(bad.ctx).Execute(); status(resp) != 401 {
			t.Fatalf("failure %d: %d, want 401", i, status(resp))
		}
	}
	_, resp, _ := bad.api.SandboxAPI.ListSandboxes(bad.ctx).Execute()
	if status(resp) != 429 || resp.Header.Get("Retry-After") != "60" || resp.Header.Get("X-RateLimit-Remaining-failed-auth") != "0" {
		t.Fatalf("third failure: %d, headers %v", status(resp), resp.Header)
	}
	// The block is per address: the right key from the same address waits too.
	good := newClient(t, s, daytonatest.DefaultKey)
	if _, resp, _ := good.api.SandboxAPI.ListSandboxes(good.ctx).Execute(); status(resp) != 429 {
		t.Fatalf("a good key from a blocked address: %d, want 429", status(resp))
	}
}

// 4. 403 can be transient; a missing permission is not.
func TestForbidden(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s, daytonatest.DefaultKey)
	sb := c.create(t, "perm", nil)
	s.Inject(daytonatest.RouteDelete, 1, daytonatest.Scripted{Status: 403})
	_, resp, err := c.api.SandboxAPI.DeleteSandbox(c.ctx, sb.GetId()).Execute()
	if status(resp) != 403 || !strings.Contains(body(err), `"Invalid authentication context"`) {
		t.Fatalf("injected 403: %d %s", status(resp), body(err))
	}
	if rec, _ := s.Sandbox(sb.GetId()); rec.DeleteRequested {
		t.Fatal("a refused delete took effect")
	}

	s.AddKeyWithPermissions("reader", daytonatest.DefaultOrg, daytonatest.PermWriteSandboxes)
	r := newClient(t, s, "reader")
	if _, _, err := r.api.SandboxAPI.GetSandbox(r.ctx, sb.GetId()).Execute(); err != nil {
		t.Fatalf("read with a scoped key: %v", err)
	}
	if _, resp, err := r.api.SandboxAPI.SetAutostopInterval(r.ctx, sb.GetId(), 5).Execute(); status(resp) != 201 {
		t.Fatalf("setter with write:sandboxes: %d %v", status(resp), err)
	}
	_, resp, err = r.api.SandboxAPI.DeleteSandbox(r.ctx, sb.GetId()).Execute()
	if status(resp) != 403 || !strings.Contains(body(err), `"Access denied"`) {
		t.Fatalf("delete without delete:sandboxes: %d %s", status(resp), body(err))
	}
	if rec, _ := s.Sandbox(sb.GetId()); rec.DeleteRequested {
		t.Fatal("a forbidden delete took effect")
	}
}

// 5. Stop of a stopped, archived or errored sandbox answers 400.
func TestStopRefusals(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s, daytonatest.DefaultKey)
	for state, want := range map[string]string{
		"stopped":  "Sandbox is not in a stoppable state",
		"archived": "Sandbox is not in a stoppable state",
		"error":    "Sandbox is in an errored state",
	} {
		sb := seedIn(t, s, daytonatest.SeedSandbox{State: state})
		_, resp, err := c.api.SandboxAPI.StopSandbox(c.ctx, sb.ID).Execute()
		if status(resp) != 400 || !strings.Contains(body(err), want) {
			t.Errorf("stop of %s: %d %s, want 400 %q", state, status(resp), body(err), want)
		}
	}
}

// 7. Delete of an errored sandbox: 200, then 404 at once; not listed unless
// asked. Delete with live forks: 400.
func TestDeleteErroredAndForked(t *testing.T) {
	s := newServer(t, daytonatest.WithDestroyLag(time.Hour))
	c := newClient(t, s, daytonatest.DefaultKey)
	sb := seedIn(t, s, daytonatest.SeedSandbox{Name: "broken", State: "error", ErrorReason: "disk full"})
	if _, resp, err := c.api.SandboxAPI.DeleteSandbox(c.ctx, sb.ID).Execute(); status(resp) != 200 {
		t.Fatalf("delete errored: %d %v", status(resp), err)
	}
	if _, resp, _ := c.api.SandboxAPI.GetSandbox(c.ctx, sb.ID).Execute(); status(resp) != 404 {
		t.Fatalf("GET after deleting an errored sandbox: %d, want 404 at once", status(resp))
	}
	if rec, _ := s.Sandbox(sb.ID); rec.State != "error" || !rec.DeleteRequested {
		t.Fatalf("record %+v", rec)
	}
	page, _, err := c.api.SandboxAPI.ListSandboxes(c.ctx).Execute()
	if err != nil || len(page.Items) != 0 {
		t.Fatalf("list: %d items, %v; want none", len(page.Items), err)
	}
	page, _, err = c.api.SandboxAPI.ListSandboxes(c.ctx).IncludeErroredDeleted(true).Execute()
	if err != nil || len(page.Items) != 1 {
		t.Fatalf("list with includeErroredDeleted: %d items, %v; want 1", len(page.Items), err)
	}

	parent := seedIn(t, s, daytonatest.SeedSandbox{Name: "parent"})
	child := seedIn(t, s, daytonatest.SeedSandbox{Name: "child", ForkOf: parent.ID})
	_, resp, err := c.api.SandboxAPI.DeleteSandbox(c.ctx, parent.ID).Execute()
	if status(resp) != 400 || !strings.Contains(body(err), "active fork children") {
		t.Fatalf("delete with a live fork: %d %s", status(resp), body(err))
	}
	if _, _, err := c.api.SandboxAPI.DeleteSandbox(c.ctx, child.ID).Execute(); err != nil {
		t.Fatal(err)
	}
	if _, resp, err := c.api.SandboxAPI.DeleteSandbox(c.ctx, parent.ID).Execute(); status(resp) != 200 {
		t.Fatalf("delete once the fork is deleted: %d %v", status(resp), err)
	}
}

// 8. A create can fail although the sandbox exists.
func TestCreateFailsToStart(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s, daytonatest.DefaultKey)
	s.Inject(daytonatest.RouteCreate, 1, daytonatest.Scripted{FailStart: true})
	req := apiclient.NewCreateSandbox()
	req.SetName("doomed")
	_, resp, err := c.api.SandboxAPI.CreateSandbox(c.ctx).CreateSandbox(*req).Execute()
	if status(resp) != 400 || !strings.Contains(body(err), "Sandbox failed to start: ") {
		t.Fatalf("create: %d %s", status(resp), body(err))
	}
	got, _, err := c.api.SandboxAPI.GetSandbox(c.ctx, "doomed").Execute()
	if err != nil || got.GetState() != apiclient.SANDBOXSTATE_ERROR {
		t.Fatalf("by name after the failed create: %v %v", got.GetState(), err)
	}
}

// 9. The list is sorted by last activity, newest first, by default.
func TestListSortsByLastActivity(t *testing.T) {
	clk := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := newServer(t, daytonatest.WithClock(clk.Now), daytonatest.WithStopDelay(0), daytonatest.WithCreateDelay(0))
	c := newClient(t, s, daytonatest.DefaultKey)
	old := seedIn(t, s, daytonatest.SeedSandbox{Name: "old", State: "stopped"})
	clk.Add(time.Second)
	seedIn(t, s, daytonatest.SeedSandbox{Name: "new"})
	clk.Add(time.Second)
	if _, _, err := c.api.SandboxAPI.StartSandbox(c.ctx, old.ID).Execute(); err != nil {
		t.Fatal(err)
	}
	page, _, err := c.api.SandboxAPI.ListSandboxes(c.ctx).Execute()
	if err != nil || len(page.Items) != 2 || page.Items[0].GetName() != "old" {
		t.Fatalf("default order: %v, %v; want old (just started) first", names(page), err)
	}
	page, _, err = c.api.SandboxAPI.ListSandboxes(c.ctx).Sort("createdAt").Execute()
	if err != nil || page.Items[0].GetName() != "new" {
		t.Fatalf("by createdAt: %v, %v", names(page), err)
	}
}

func names(p *apiclient.ListSandboxesResponse) []string {
	if p == nil {
		return nil
	}
	var out []string
	for _, it := range p.Items {
		out = append(out, it.GetName())
	}
	return out
}

// 10. Setters: 201; negative intervals 400; a concurrent change 409.
func TestSetters(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s, daytonatest.DefaultKey)
	sb := c.create(t, "set", nil)
	if _, resp, err := c.api.SandboxAPI.SetAutostopInterval(c.ctx, sb.GetId(), -1).Execute(); status(resp) != 400 || !strings.Contains(body(err), "Auto-stop interval must be non-negative") {
		t.Fatalf("negative auto-stop: %d %s", status(resp), body(err))
	}
	if _, resp, err := c.api.SandboxAPI.SetAutoArchiveInterval(c.ctx, sb.GetId(), -1).Execute(); status(resp) != 400 || !strings.Contains(body(err), "Auto-archive interval must be non-negative") {
		t.Fatalf("negative auto-archive: %d %s", status(resp), body(err))
	}
	s.Inject(daytonatest.RouteAutoStop, 1, daytonatest.Scripted{Status: http.StatusConflict})
	_, resp, err := c.api.SandboxAPI.SetAutostopInterval(c.ctx, sb.GetId(), 30).Execute()
	if status(resp) != 409 || !strings.Contains(body(err), "Sandbox was modified by another operation") {
		t.Fatalf("concurrent change: %d %s", status(resp), body(err))
	}
	if rec, _ := s.Sandbox(sb.GetId()); rec.AutoStopInterval == 30 {
		t.Fatal("the refused setter took effect")
	}
	if _, resp, err := c.api.SandboxAPI.SetAutostopInterval(c.ctx, sb.GetId(), 30).Execute(); status(resp) != 201 {
		t.Fatalf("setter: %d %v", status(resp), err)
	}
}

// Calls are counted per sandbox named in the path.
func TestCallsFor(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s, daytonatest.DefaultKey)
	sb := c.create(t, "counted", nil)
	c.api.SandboxAPI.GetSandbox(c.ctx, sb.GetId()).Execute()
	c.api.SandboxAPI.GetSandbox(c.ctx, "counted").Execute()
	c.api.SandboxAPI.DeleteSandbox(c.ctx, sb.GetId()).Execute()
	if got := s.CallsFor(sb.GetId()); got[daytonatest.RouteGet] != 1 || got[daytonatest.RouteDelete] != 1 {
		t.Errorf("by id: %v", got)
	}
	if got := s.CallsFor("counted"); got[daytonatest.RouteGet] != 1 || len(got) != 1 {
		t.Errorf("by name: %v", got)
	}
}
