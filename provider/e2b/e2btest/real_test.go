package e2btest_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/provider/e2b/e2btest"
)

// What the real server does to a sandbox's fate that the simulator first
// lacked (issue 30), each against e2b-dev/infra at 54693ff3.

// detail is the part of GET /sandboxes/{id} these tests read.
type detail struct {
	State            string
	StartedAt, EndAt time.Time
	Metadata         map[string]string
	Lifecycle        struct{ OnTimeout string }
}

func (c *client) detail(id string) (detail, answer) {
	c.t.Helper()
	a := c.do("GET", "/sandboxes/"+id, nil)
	var d detail
	if a.status == 200 {
		if err := json.Unmarshal(a.body, &d); err != nil {
			c.t.Fatal(err)
		}
	}
	return d, a
}

// A timeout kill never deletes the snapshot row (orchestrator/evictor/
// evict.go:151-166, delete_instance.go:22-123); a pause, a fork's
// checkpoint of the parent and a named snapshot each write one
// (pause_instance.go:36, checkpoint_instance.go:64, snapshot_template.go:
// 76). So each such sandbox, killed by its timeout, reads 200 paused with
// its last snapshot's time as endAt (sandbox_get.go:177-199, 246-251), is
// listed as paused (sandboxes_list.go:362-393), answers pause and fork
// 409 and timeout 404, is resumed by connect and resume, and is gone only
// by a DELETE: 204, then 404. One that never had a snapshot is killed.
func TestTimeoutKillKeepsTheSnapshot(t *testing.T) {
	srv, clock := newSim(t)
	c := newClient(t, srv)
	md := map[string]string{"tether-owner": "o"}
	paused := c.create(map[string]any{"timeout": 600, "metadata": md})
	expect(t, "pause", c.do("POST", "/sandboxes/"+paused+"/pause", nil), 204)
	pausedAt := clock.Now()
	clock.Advance(time.Minute)
	expect(t, "resume", c.do("POST", "/sandboxes/"+paused+"/resume", map[string]any{"timeout": 60}), 201)
	parent := c.create(map[string]any{"timeout": 60, "metadata": md})
	expect(t, "fork", c.do("POST", "/sandboxes/"+parent+"/fork", map[string]any{"timeout": 30}), 201)
	forkedAt := clock.Now()
	named := c.create(map[string]any{"timeout": 60, "metadata": md})
	expect(t, "named snapshot", c.bad("POST", "/sandboxes/"+named+"/snapshots", map[string]any{"name": "keep"}), 201)
	plain := c.create(map[string]any{"timeout": 60, "metadata": md})

	clock.Advance(2 * time.Minute) // every timeout has passed
	expect(t, "the one never snapshotted", c.do("GET", "/sandboxes/"+plain, nil), 404)
	if sb := fate(t, srv, plain); sb.State != e2btest.StateKilled || sb.KillReason != e2btest.KillTimeout {
		t.Errorf("never snapshotted: %+v", sb)
	}
	for _, tc := range []struct {
		what, id string
		at       time.Time
	}{{"paused then resumed", paused, pausedAt}, {"forked from", parent, forkedAt}, {"snapshotted", named, forkedAt}} {
		d, a := c.detail(tc.id)
		expect(t, tc.what+": GET", a, 200)
		if d.State != "paused" || !d.EndAt.Equal(tc.at) || d.Metadata["tether-owner"] != "o" || d.Lifecycle.OnTimeout != "kill" {
			t.Errorf("%s: %+v, want paused, endAt %s", tc.what, d, tc.at)
		}
		sb := fate(t, srv, tc.id)
		if sb.State != e2btest.StatePaused || !sb.Snapshot || sb.Evictions != 1 {
			t.Errorf("%s: record %+v", tc.what, sb)
		}
		listed, _ := c.list("state=paused&metadata=" + url.QueryEscape("tether-owner=o"))
		found := false
		for _, l := range listed {
			found = found || l.SandboxID == tc.id && l.State == "paused"
		}
		if !found {
			t.Errorf("%s: not listed as paused: %+v", tc.what, listed)
		}
		expect(t, tc.what+": pause", c.do("POST", "/sandboxes/"+tc.id+"/pause", nil), 409)
		expect(t, tc.what+": fork", c.do("POST", "/sandboxes/"+tc.id+"/fork", nil), 409)
		expect(t, tc.what+": timeout", c.do("POST", "/sandboxes/"+tc.id+"/timeout", map[string]any{"timeout": 60}), 404)
	}
	// connect resumes it, under its id; the next timeout pauses it again.
	expect(t, "connect", c.do("POST", "/sandboxes/"+paused+"/connect", map[string]any{"timeout": 60}), 201)
	if sb := fate(t, srv, paused); sb.State != e2btest.StateRunning || sb.Resumes != 2 {
		t.Errorf("after connect: %+v", sb)
	}
	clock.Advance(2 * time.Minute)
	if sb := fate(t, srv, paused); sb.State != e2btest.StatePaused || sb.Evictions != 2 {
		t.Errorf("timed out again: %+v", sb)
	}
	// Only a DELETE ends them.
	clock.Advance(30 * 24 * time.Hour)
	for _, id := range []string{paused, parent, named} {
		expect(t, "kill", c.do("DELETE", "/sandboxes/"+id, nil), 204)
		expect(t, "kill again", c.do("DELETE", "/sandboxes/"+id, nil), 404)
		expect(t, "get after kill", c.do("GET", "/sandboxes/"+id, nil), 404)
		expect(t, "connect after kill", c.do("POST", "/sandboxes/"+id+"/connect", map[string]any{"timeout": 60}), 404)
		if sb := fate(t, srv, id); sb.State != e2btest.StateKilled || sb.Snapshot || sb.KillReason != e2btest.KillRequest {
			t.Errorf("after the DELETE: %+v", sb)
		}
	}
}

// A resume takes the auto-pause its snapshot recorded unless its body
// overrides it (handlers/sandbox_resume.go:313-316).
func TestResumeTakesTheSnapshotsAutoPause(t *testing.T) {
	srv, clock := newSim(t)
	c := newClient(t, srv)
	id := c.create(map[string]any{"timeout": 60, "autoPause": true})
	expect(t, "pause", c.do("POST", "/sandboxes/"+id+"/pause", nil), 204)
	expect(t, "resume without auto-pause", c.do("POST", "/sandboxes/"+id+"/resume", map[string]any{"timeout": 60, "autoPause": false}), 201)
	clock.Advance(2 * time.Minute) // killed, but its snapshot stays
	if d, _ := c.detail(id); d.State != "paused" || d.Lifecycle.OnTimeout != "pause" {
		t.Errorf("after the timeout: %+v, want paused with the snapshot's onTimeout pause", d)
	}
	expect(t, "resume", c.do("POST", "/sandboxes/"+id+"/resume", map[string]any{"timeout": 60}), 201)
	if sb := fate(t, srv, id); !sb.AutoPause {
		t.Errorf("resumed without its snapshot's auto-pause: %+v", sb)
	}
}

// POST /timeout may shorten (KeepAliveFor with allowShorter,
// handlers/sandbox_timeout.go:52); a negative timeout is the spec
// validator's 400 (spec/openapi.yml:889-898, packages/api/main.go:180-196),
// not the handler's 0.
func TestTimeoutShortensAndRefusesNegative(t *testing.T) {
	srv, _ := newSim(t)
	c := newClient(t, srv)
	id := c.create(map[string]any{"timeout": 3600})
	start := fate(t, srv, id).StartedAt
	expect(t, "shorten to 2 min", c.do("POST", "/sandboxes/"+id+"/timeout", map[string]any{"timeout": 120}), 204)
	if got := fate(t, srv, id).EndAt.Sub(start); got != 2*time.Minute {
		t.Errorf("ends %s after start, want 2m", got)
	}
	a := c.bad("POST", "/sandboxes/"+id+"/timeout", map[string]any{"timeout": -1})
	expect(t, "negative", a, 400)
	if sb := fate(t, srv, id); sb.State != e2btest.StateRunning || sb.EndAt.Sub(start) != 2*time.Minute {
		t.Errorf("a refused negative timeout changed the sandbox: %+v", sb)
	}
}

// The kill/resume race (infra#3636, open at 54693ff3): a DELETE while a
// resume restores a paused sandbox finds nothing in the store, deletes the
// snapshot and answers 204; GET answers 404 and the list omits it while
// the restore runs; then the restore lands and the sandbox runs again.
// The race is a seeded fault (resume-race) or held by hand (HoldRestores).
func TestKillDuringResumeComesBack(t *testing.T) {
	for _, how := range []string{"held", "fault"} {
		t.Run(how, func(t *testing.T) {
			srv, _ := newSim(t)
			c := newClient(t, srv)
			id := c.create(map[string]any{"timeout": 600, "metadata": map[string]string{"k": "v"}})
			expect(t, "pause", c.do("POST", "/sandboxes/"+id+"/pause", nil), 204)
			if how == "held" {
				srv.HoldRestores()
			} else {
				srv.SetFaults(e2btest.Faults{Seed: 1, RateResumeRace: 1, RestoreTime: time.Hour})
			}
			resumed := make(chan answer, 1)
			go func() { resumed <- c.do("POST", "/sandboxes/"+id+"/resume", map[string]any{"timeout": 60}) }()
			testutil.WaitFor(t, "the restore to start", func() bool { return fate(t, srv, id).State == e2btest.StateResuming })
			d, a := c.detail(id)
			expect(t, "GET during the restore, before the DELETE", a, 200)
			if d.State != "paused" {
				t.Errorf("during the restore: %s, want paused (from its snapshot)", d.State)
			}
			expect(t, "the DELETE", c.do("DELETE", "/sandboxes/"+id, nil), 204)
			expect(t, "GET after the 204", c.do("GET", "/sandboxes/"+id, nil), 404)
			if l, _ := c.list("metadata=" + url.QueryEscape("k=v")); len(l) != 0 {
				t.Errorf("listed after the 204: %+v", l)
			}
			expect(t, "a second DELETE", c.do("DELETE", "/sandboxes/"+id, nil), 404)
			if how == "held" {
				srv.ReleaseRestores()
			} else {
				srv.Close() // ends the restore's wait
			}
			if how == "fault" {
				return
			}
			expect(t, "the resume", <-resumed, 201)
			d, a = c.detail(id)
			expect(t, "GET after the restore", a, 200)
			if d.State != "running" {
				t.Errorf("after the restore: %s, want running", d.State)
			}
			if sb := fate(t, srv, id); sb.State != e2btest.StateRunning || sb.Revived != 1 || sb.Snapshot {
				t.Errorf("record: %+v", sb)
			}
			expect(t, "the DELETE that ends it", c.do("DELETE", "/sandboxes/"+id, nil), 204)
			expect(t, "gone", c.do("GET", "/sandboxes/"+id, nil), 404)
		})
	}
}

// A connect of a sandbox being restored joins that restore
// (orchestrator/create_instance.go:217-247): it starts no second one, and
// answers with it (201), or, reaching the server after it landed, as to a
// running sandbox (200).
func TestConnectJoinsARestore(t *testing.T) {
	srv, _ := newSim(t)
	c := newClient(t, srv)
	id := c.create(map[string]any{"timeout": 600})
	expect(t, "pause", c.do("POST", "/sandboxes/"+id+"/pause", nil), 204)
	srv.HoldRestores()
	var wg sync.WaitGroup
	answers := make([]answer, 2)
	for i, path := range []string{"/resume", "/connect"} {
		if i == 1 {
			testutil.WaitFor(t, "the restore to start", func() bool { return fate(t, srv, id).State == e2btest.StateResuming })
		}
		wg.Go(func() { answers[i] = c.do("POST", "/sandboxes/"+id+path, map[string]any{"timeout": 60}) })
	}
	srv.ReleaseRestores()
	wg.Wait()
	expect(t, "resume", answers[0], 201)
	if answers[1].status != 201 && answers[1].status != 200 {
		t.Errorf("connect: %d %s", answers[1].status, answers[1].body)
	}
	if sb := fate(t, srv, id); sb.Resumes != 1 || sb.State != e2btest.StateRunning {
		t.Errorf("record %+v, want one restore", sb)
	}
}

// One team, many keys, and an auth provider's bearer with X-Team-ID
// (spec/openapi.yml:10-42; service.go:174-258): every credential of a
// team sees and kills every sandbox of the team; another team's sandbox
// answers 404 whichever credential asks.
func TestTeamKeysAndBearer(t *testing.T) {
	srv, _ := newSim(t)
	srv.AddKey("e2b_second", e2btest.DefaultTeam)
	srv.AddBearer("jwt-of-a-member", e2btest.DefaultTeam)
	srv.AddBearer("jwt-elsewhere", "team-2")
	c := newClient(t, srv)
	id := c.create(map[string]any{"timeout": 600})

	c.key = "e2b_second"
	expect(t, "the team's second key reads it", c.do("GET", "/sandboxes/"+id, nil), 200)

	c.key, c.hdr = "", http.Header{"Authorization": {"Bearer jwt-of-a-member"}, "X-Team-Id": {e2btest.DefaultTeam}}
	expect(t, "a member's bearer reads it", c.bad("GET", "/sandboxes/"+id, nil), 200)
	c.hdr.Set("X-Team-Id", "team-2")
	expect(t, "a bearer for a team it is not in", c.bad("GET", "/sandboxes/"+id, nil), 401)
	c.hdr.Del("X-Team-Id")
	expect(t, "a bearer without X-Team-ID", c.bad("GET", "/sandboxes/"+id, nil), 401)
	c.hdr = http.Header{"Authorization": {"Bearer jwt-elsewhere"}, "X-Team-Id": {"team-2"}}
	expect(t, "another team's bearer", c.bad("GET", "/sandboxes/"+id, nil), 404)
	expect(t, "another team's bearer cannot kill it", c.bad("DELETE", "/sandboxes/"+id, nil), 404)
	c.hdr = http.Header{"Authorization": {"Bearer jwt-of-a-member"}, "X-Team-Id": {e2btest.DefaultTeam}}
	expect(t, "a member's bearer kills it", c.bad("DELETE", "/sandboxes/"+id, nil), 204)
	if sb := fate(t, srv, id); sb.State != e2btest.StateKilled {
		t.Errorf("record %+v", sb)
	}
}

// A blocked team authenticates, and the routes of the allowlist still
// answer: GET, the list and DELETE (middleware/blocked_team.go:14-47);
// every other answers 403 "team is blocked: <reason>"
// (packages/auth/pkg/auth/internal/team/state.go:28-39).
func TestBlockedTeamAllowlist(t *testing.T) {
	srv, _ := newSim(t)
	c := newClient(t, srv)
	id := c.create(map[string]any{"timeout": 600})
	other := c.create(map[string]any{"timeout": 600})
	srv.BlockTeam(e2btest.DefaultTeam, "unpaid invoice")
	expect(t, "GET", c.do("GET", "/sandboxes/"+id, nil), 200)
	expect(t, "list", c.do("GET", "/v2/sandboxes", nil), 200)
	for _, call := range []struct {
		method, path string
		body         any
	}{
		{"POST", "/sandboxes", map[string]any{"templateID": "base"}},
		{"POST", "/sandboxes/" + id + "/pause", nil},
		{"POST", "/sandboxes/" + id + "/timeout", map[string]any{"timeout": 60}},
		{"POST", "/sandboxes/" + id + "/connect", map[string]any{"timeout": 60}},
		{"POST", "/sandboxes/" + id + "/refreshes", map[string]any{"duration": 60}},
		{"POST", "/sandboxes/" + id + "/fork", map[string]any{}},
	} {
		a := c.do(call.method, call.path, call.body)
		expect(t, call.method+" "+call.path, a, 403)
		if a.message() != "team is blocked: unpaid invoice" {
			t.Errorf("%s %s: %q", call.method, call.path, a.message())
		}
	}
	expect(t, "DELETE", c.do("DELETE", "/sandboxes/"+id, nil), 204)
	srv.BlockTeam(e2btest.DefaultTeam, "")
	if a := c.do("POST", "/sandboxes/"+other+"/pause", nil); a.status != 403 || a.message() != "team is blocked" {
		t.Errorf("without a reason: %d %q", a.status, a.message())
	}
	srv.UnblockTeam(e2btest.DefaultTeam)
	expect(t, "unblocked", c.do("POST", "/sandboxes/"+other+"/pause", nil), 204)
}
