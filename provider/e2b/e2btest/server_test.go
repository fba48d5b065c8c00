package e2btest_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/provider/e2b/e2btest"
	"github.com/tether-run/tether/provider/e2b/internal/spectest"
)

// client speaks raw HTTP to a simulator, every exchange checked against
// tether's schema of the E2B API.
type client struct {
	t   *testing.T
	srv *e2btest.Server
	key string
	ua  string // the User-Agent sent, if set
	// hdr are headers sent beside the key (a bearer and X-Team-ID).
	hdr http.Header
	hc  *http.Client
	tr  *spectest.Transport
}

func newClient(t *testing.T, srv *e2btest.Server) *client {
	t.Helper()
	tr := spectest.New(t, srv.URL)
	c := &client{t: t, srv: srv, key: e2btest.DefaultKey, hc: &http.Client{Transport: tr, Timeout: 20 * time.Second}, tr: tr}
	t.Cleanup(func() { tr.Check(t) })
	return c
}

// newSim starts a simulator on a manual clock.
func newSim(t *testing.T, opts ...e2btest.Option) (*e2btest.Server, *e2btest.ManualClock) {
	t.Helper()
	clock := e2btest.NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	srv, _ := testutil.E2B(t, append([]e2btest.Option{e2btest.WithClock(clock.Now)}, opts...)...)
	return srv, clock
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) message() string {
	var e struct{ Message string }
	_ = json.Unmarshal(a.body, &e)
	return e.Message
}

func (c *client) do(method, path string, body any) answer {
	c.t.Helper()
	return c.send(c.hc, method, path, body)
}

// bad sends a request the schema refuses, unchecked, to see the server's
// own answer.
func (c *client) bad(method, path string, body any) answer {
	c.t.Helper()
	return c.send(http.DefaultClient, method, path, body)
}

func (c *client) send(hc *http.Client, method, path string, body any) answer {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.srv.URL+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if c.key != "" {
		req.Header.Set("X-API-Key", c.key)
	}
	if c.ua != "" {
		req.Header.Set("User-Agent", c.ua)
	}
	for k, v := range c.hdr {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, b}
}

func (c *client) create(body map[string]any) string {
	c.t.Helper()
	if _, ok := body["templateID"]; !ok {
		body["templateID"] = "base"
	}
	a := c.do("POST", "/sandboxes", body)
	if a.status != http.StatusCreated {
		c.t.Fatalf("create: %d %s", a.status, a.body)
	}
	var sb struct{ SandboxID string }
	if err := json.Unmarshal(a.body, &sb); err != nil {
		c.t.Fatal(err)
	}
	return sb.SandboxID
}

func expect(t *testing.T, what string, a answer, status int) {
	t.Helper()
	if a.status != status {
		t.Fatalf("%s: %d %s, want %d", what, a.status, a.body, status)
	}
}

func fate(t *testing.T, srv *e2btest.Server, id string) e2btest.Sandbox {
	t.Helper()
	sb, ok := srv.Sandbox(id)
	if !ok {
		t.Fatalf("no sandbox %s in the record", id)
	}
	return sb
}

// Create: metadata kept; no timeout is the server's 15 s, counted from
// the node's answer; 0 and above the team's maximum refused
// (handlers/timeout_helper.go:18-39); autoPauseMemory=false needs autoPause.
func TestCreateTimeouts(t *testing.T) {
	srv, _ := newSim(t)
	c := newClient(t, srv)
	id := c.create(map[string]any{"metadata": map[string]string{"a": "1"}})
	sb := fate(t, srv, id)
	if got := sb.EndAt.Sub(sb.StartedAt); got != 15*time.Second {
		t.Errorf("default timeout %s, want 15s", got)
	}
	if sb.Metadata["a"] != "1" || sb.State != e2btest.StateRunning {
		t.Errorf("sandbox %+v", sb)
	}
	id300 := c.create(map[string]any{"timeout": 300})
	if sb := fate(t, srv, id300); sb.EndAt.Sub(sb.StartedAt) != 300*time.Second {
		t.Errorf("timeout 300: %s", sb.EndAt.Sub(sb.StartedAt))
	}
	a := c.do("POST", "/sandboxes", map[string]any{"templateID": "base", "timeout": 0})
	expect(t, "timeout 0", a, 400) // the spec allows 0, the server refuses it
	if a.message() != "Timeout must be greater than 0" {
		t.Errorf("message %q", a.message())
	}
	a = c.do("POST", "/sandboxes", map[string]any{"templateID": "base", "timeout": 3601})
	expect(t, "timeout above 1 h", a, 400)
	if a.message() != "Timeout cannot be greater than 1 hours" {
		t.Errorf("message %q", a.message())
	}
	expect(t, "autoPauseMemory alone", c.do("POST", "/sandboxes", map[string]any{"templateID": "base", "autoPauseMemory": false}), 400)
	if n := len(srv.Sandboxes()); n != 2 {
		t.Errorf("%d sandboxes after refused creates, want 2", n)
	}
}

// A timeout kills, or with autoPause pauses; a paused sandbox keeps its
// snapshot and answers GET as paused, but 404 to timeout and refreshes.
func TestTimeoutKillsOrPauses(t *testing.T) {
	srv, clock := newSim(t)
	c := newClient(t, srv)
	killed := c.create(map[string]any{"timeout": 60})
	paused := c.create(map[string]any{"timeout": 60, "autoPause": true, "metadata": map[string]string{"k": "v"}})
	clock.Advance(59 * time.Second)
	expect(t, "before the timeout", c.do("GET", "/sandboxes/"+killed, nil), 200)
	clock.Advance(time.Second)
	expect(t, "killed by its timeout", c.do("GET", "/sandboxes/"+killed, nil), 404)
	if sb := fate(t, srv, killed); sb.State != e2btest.StateKilled || sb.KillReason != e2btest.KillTimeout {
		t.Errorf("killed: %+v", sb)
	}
	a := c.do("GET", "/sandboxes/"+paused, nil)
	expect(t, "paused by its timeout", a, 200)
	var d struct {
		State     string
		Metadata  map[string]string
		Lifecycle struct{ OnTimeout string }
	}
	_ = json.Unmarshal(a.body, &d)
	if d.State != "paused" || d.Metadata["k"] != "v" || d.Lifecycle.OnTimeout != "pause" {
		t.Errorf("paused detail %+v", d)
	}
	if sb := fate(t, srv, paused); !sb.Snapshot || sb.Pauses != 1 {
		t.Errorf("paused: %+v", sb)
	}
	expect(t, "timeout of a paused sandbox", c.do("POST", "/sandboxes/"+paused+"/timeout", map[string]any{"timeout": 60}), 404)
	expect(t, "refresh of a paused sandbox", c.do("POST", "/sandboxes/"+paused+"/refreshes", map[string]any{"duration": 60}), 404)
	// Still there a day later: a paused sandbox has no timeout.
	clock.Advance(24 * time.Hour)
	if sb := fate(t, srv, paused); sb.State != e2btest.StatePaused {
		t.Errorf("a day later: %s", sb.State)
	}
}

// POST /timeout shortens or lengthens from now, 0 ends at once, the team's
// maximum length caps it; refreshes only lengthen, by at least 15 s
// (orchestrator/keep_alive.go:19-80, handlers/sandbox_refresh.go:47-57).
func TestTimeoutAndRefresh(t *testing.T) {
	srv, clock := newSim(t)
	c := newClient(t, srv)
	id := c.create(map[string]any{"timeout": 600})
	start := fate(t, srv, id).StartedAt
	expect(t, "shorten", c.do("POST", "/sandboxes/"+id+"/timeout", map[string]any{"timeout": 30}), 204)
	if got := fate(t, srv, id).EndAt.Sub(start); got != 30*time.Second {
		t.Errorf("after timeout 30: ends %s after start", got)
	}
	expect(t, "refresh shorter", c.do("POST", "/sandboxes/"+id+"/refreshes", map[string]any{"duration": 1}), 204)
	if got := fate(t, srv, id).EndAt.Sub(start); got != 30*time.Second {
		t.Errorf("a refresh shortened it: %s", got)
	}
	clock.Advance(20 * time.Second)
	expect(t, "refresh", c.do("POST", "/sandboxes/"+id+"/refreshes", map[string]any{"duration": 60}), 204)
	if got := fate(t, srv, id).EndAt.Sub(start); got != 80*time.Second {
		t.Errorf("after refresh 60 at +20s: %s", got)
	}
	expect(t, "refresh above 3600", c.bad("POST", "/sandboxes/"+id+"/refreshes", map[string]any{"duration": 3601}), 400)
	expect(t, "beyond the maximum", c.do("POST", "/sandboxes/"+id+"/timeout", map[string]any{"timeout": 7200}), 204)
	if got := fate(t, srv, id).EndAt.Sub(start); got != time.Hour {
		t.Errorf("capped end %s after start, want 1h", got)
	}
	expect(t, "timeout 0", c.do("POST", "/sandboxes/"+id+"/timeout", map[string]any{"timeout": 0}), 204)
	expect(t, "ended at once", c.do("GET", "/sandboxes/"+id, nil), 404)
	if sb := fate(t, srv, id); sb.KillReason != e2btest.KillTimeout {
		t.Errorf("timeout 0: %+v", sb)
	}

	old := c.create(map[string]any{"timeout": 3600})
	clock.Advance(time.Hour - time.Second)
	expect(t, "near the maximum length", c.do("POST", "/sandboxes/"+old+"/timeout", map[string]any{"timeout": 600}), 204)
	if sb := fate(t, srv, old); !sb.EndAt.Equal(sb.StartedAt.Add(time.Hour)) {
		t.Errorf("end %s, want start+1h", sb.EndAt.Sub(sb.StartedAt))
	}
}

// DELETE answers 204, then 404; a paused sandbox's kill deletes its
// snapshot (handlers/sandbox_kill.go:39-104).
func TestKillThen404(t *testing.T) {
	srv, _ := newSim(t)
	c := newClient(t, srv)
	for _, pausedFirst := range []bool{false, true} {
		id := c.create(map[string]any{"timeout": 60})
		if pausedFirst {
			expect(t, "pause", c.do("POST", "/sandboxes/"+id+"/pause", nil), 204)
			expect(t, "pause again", c.do("POST", "/sandboxes/"+id+"/pause", nil), 409)
			if !fate(t, srv, id).Snapshot {
				t.Fatal("no snapshot after pause")
			}
		}
		expect(t, "kill", c.do("DELETE", "/sandboxes/"+id, nil), 204)
		expect(t, "kill again", c.do("DELETE", "/sandboxes/"+id, nil), 404)
		expect(t, "get after kill", c.do("GET", "/sandboxes/"+id, nil), 404)
		sb := fate(t, srv, id)
		if sb.State != e2btest.StateKilled || sb.KillReason != e2btest.KillRequest || sb.Snapshot || sb.KilledBy == "" {
			t.Errorf("paused first %v: %+v", pausedFirst, sb)
		}
	}
}

// The record says who killed a sandbox by the DELETE's User-Agent, as
// Daytona's simulator says who deleted one: tether's drain sends
// "tether", the runner's SDK its own; a timeout names no caller. The key
// is not shown.
func TestKilledByNamesTheCaller(t *testing.T) {
	srv, clock := newSim(t)
	c := newClient(t, srv)
	byTether := c.create(map[string]any{"timeout": 60})
	byRunner := c.create(map[string]any{"timeout": 60})
	paused := c.create(map[string]any{"timeout": 60})
	expired := c.create(map[string]any{"timeout": 1})
	expect(t, "pause", c.do("POST", "/sandboxes/"+paused+"/pause", nil), 204)
	c.ua = "tether"
	expect(t, "tether's kill", c.do("DELETE", "/sandboxes/"+byTether, nil), 204)
	expect(t, "tether's kill of a paused sandbox", c.do("DELETE", "/sandboxes/"+paused, nil), 204)
	c.ua = "e2b-js-sdk/1.2.3"
	expect(t, "the runner's kill", c.do("DELETE", "/sandboxes/"+byRunner, nil), 204)
	clock.Advance(2 * time.Second)
	for id, want := range map[string]string{
		byTether: e2btest.KilledByAPI + "tether",
		paused:   "DELETE from tether",
		byRunner: "DELETE from e2b-js-sdk/1.2.3",
		expired:  "",
	} {
		sb := fate(t, srv, id)
		if sb.State != e2btest.StateKilled || sb.KilledBy != want {
			t.Errorf("sandbox %s: %s, killed by %q; want killed by %q", id, sb.State, sb.KilledBy, want)
		}
		if strings.Contains(sb.KilledBy, e2btest.DefaultKey[len(e2btest.DefaultKey)-4:]) {
			t.Errorf("sandbox %s: killed by %q shows the key", id, sb.KilledBy)
		}
	}
}

// A sandbox being killed reads as 404, and a second DELETE meanwhile
// answers 204 (orchestrator/delete_instance.go:44-51).
func TestKillInProgress(t *testing.T) {
	srv, _ := newSim(t)
	c := newClient(t, srv)
	id := c.create(map[string]any{})
	srv.HoldKills()
	done := make(chan answer)
	go func() { done <- c.do("DELETE", "/sandboxes/"+id, nil) }()
	testutil.WaitFor(t, "the kill to start", func() bool { return fate(t, srv, id).State == e2btest.StateKilling })
	expect(t, "get while killing", c.do("GET", "/sandboxes/"+id, nil), 404)
	expect(t, "second delete while killing", c.do("DELETE", "/sandboxes/"+id, nil), 204)
	srv.ReleaseKills()
	expect(t, "first delete", <-done, 204)
	if sb := fate(t, srv, id); sb.State != e2btest.StateKilled {
		t.Errorf("after the kill: %s", sb.State)
	}
}

// Another team's sandbox answers 404 to everything, like one that never
// existed, and is untouched.
func TestOtherTeam404(t *testing.T) {
	srv, _ := newSim(t)
	srv.AddKey("e2b_other", "team-2")
	c := newClient(t, srv)
	theirs := srv.AddSandbox("team-2", e2btest.SeedSandbox{Metadata: map[string]string{"tether-owner": "x"}, Timeout: time.Minute})
	for _, call := range []struct{ method, path string }{
		{"GET", ""}, {"DELETE", ""}, {"POST", "/pause"}, {"POST", "/resume"},
	} {
		a := c.do(call.method, "/sandboxes/"+theirs.ID+call.path, nil)
		expect(t, call.method+call.path, a, 404)
		if want := fmt.Sprintf("Sandbox %q doesn't exist or you don't have access to it", theirs.ID); a.message() != want {
			t.Errorf("%s: %q", call.method+call.path, a.message())
		}
	}
	expect(t, "timeout", c.do("POST", "/sandboxes/"+theirs.ID+"/timeout", map[string]any{"timeout": 1}), 404)
	a := c.do("GET", "/v2/sandboxes", nil)
	if strings.Contains(string(a.body), theirs.ID) {
		t.Error("the list shows another team's sandbox")
	}
	if sb := fate(t, srv, theirs.ID); sb.State != e2btest.StateRunning || !sb.EndAt.Equal(theirs.EndAt) {
		t.Errorf("another team's sandbox was touched: %+v", sb)
	}
	c.key = "e2b_other"
	expect(t, "its own team", c.do("GET", "/sandboxes/"+theirs.ID, nil), 200)
}

// Ids: "<id>-<client id>" names <id>; more dashes or other characters are
// refused (utils/split.go:10-26).
func TestShortID(t *testing.T) {
	srv, _ := newSim(t)
	c := newClient(t, srv)
	id := c.create(map[string]any{})
	expect(t, "id-client", c.do("GET", "/sandboxes/"+id+"-6532622b", nil), 200)
	expect(t, "two dashes", c.bad("GET", "/sandboxes/"+id+"-a-b", nil), 400)
	expect(t, "upper case", c.bad("GET", "/sandboxes/"+strings.ToUpper(id), nil), 400)
}

// A create in flight is in no store: GET and DELETE answer 404 and the
// list omits it until the node answers (orchestrator/create_instance.go:
// 192, 473); its reservation counts against the concurrency limit.
func TestCreateInFlight(t *testing.T) {
	srv, _ := newSim(t)
	srv.AddTeam(e2btest.DefaultTeam, e2btest.Limits{Concurrency: 1})
	c := newClient(t, srv)
	srv.HoldCreates()
	done := make(chan string)
	go func() { done <- c.create(map[string]any{"metadata": map[string]string{"n": "1"}}) }()
	var id string
	testutil.WaitFor(t, "the create to be reserved", func() bool {
		for _, sb := range srv.Sandboxes() {
			if sb.State == e2btest.StateCreating {
				id = sb.ID
				return true
			}
		}
		return false
	})
	expect(t, "get in flight", c.do("GET", "/sandboxes/"+id, nil), 404)
	expect(t, "delete in flight", c.do("DELETE", "/sandboxes/"+id, nil), 404)
	if a := c.do("GET", "/v2/sandboxes?metadata=n%3D1", nil); string(bytes.TrimSpace(a.body)) != "[]" {
		t.Errorf("list in flight: %s", a.body)
	}
	a := c.do("POST", "/sandboxes", map[string]any{"templateID": "base"})
	expect(t, "a second create over the limit", a, 429)
	if !strings.Contains(a.message(), "maximum number of concurrent E2B sandboxes (1)") || a.header.Get("Retry-After") != "" {
		t.Errorf("concurrency 429: %q, Retry-After %q", a.message(), a.header.Get("Retry-After"))
	}
	srv.ReleaseCreates()
	if got := <-done; got != id {
		t.Fatalf("create answered %s, reserved %s", got, id)
	}
	expect(t, "get after the answer", c.do("GET", "/sandboxes/"+id, nil), 200)
	if sb := fate(t, srv, id); sb.State != e2btest.StateRunning {
		t.Errorf("after the answer: %s", sb.State)
	}
}

type listed struct {
	SandboxID string
	State     string
	Metadata  map[string]string
}

func (c *client) list(query string) ([]listed, answer) {
	c.t.Helper()
	a := c.do("GET", "/v2/sandboxes?"+query, nil)
	expect(c.t, "list "+query, a, 200)
	var out []listed
	if err := json.Unmarshal(a.body, &out); err != nil {
		c.t.Fatal(err)
	}
	return out, a
}

// The list: running and paused (both by default), filtered by metadata
// and state, newest first, paged by X-Next-Token (handlers/
// sandboxes_list.go:241-403, utils/pagination.go).
func TestListPagingAndFilters(t *testing.T) {
	srv, clock := newSim(t)
	srv.AddTeam(e2btest.DefaultTeam, e2btest.Limits{Concurrency: 100})
	c := newClient(t, srv)
	var ours []string
	for i := range 25 {
		clock.Advance(time.Millisecond) // distinct start times
		md := map[string]string{"owner": "me", "i": strconv.Itoa(i)}
		if i%5 == 0 {
			md["owner"] = "you"
		}
		id := c.create(map[string]any{"metadata": md, "timeout": 600})
		if md["owner"] == "me" {
			ours = append(ours, id)
		}
	}
	expect(t, "pause one", c.do("POST", "/sandboxes/"+ours[0]+"/pause", nil), 204)

	seen := map[string]bool{}
	token, pages := "", 0
	filter := url.QueryEscape("owner=me")
	for {
		q := "limit=7&metadata=" + filter
		if token != "" {
			q += "&nextToken=" + url.QueryEscape(token)
		}
		page, a := c.list(q)
		pages++
		if a.header.Get("X-Total-Running") != "19" {
			t.Errorf("X-Total-Running %q, want 19", a.header.Get("X-Total-Running"))
		}
		for _, it := range page {
			if seen[it.SandboxID] {
				t.Errorf("%s listed twice", it.SandboxID)
			}
			seen[it.SandboxID] = true
			if it.Metadata["owner"] != "me" {
				t.Errorf("filter let through %+v", it)
			}
		}
		token = a.header.Get("X-Next-Token")
		if token == "" {
			if len(page) > 7 {
				t.Errorf("last page of %d", len(page))
			}
			break
		}
		if len(page) != 7 {
			t.Errorf("a page with a next token has %d items", len(page))
		}
	}
	if len(seen) != 20 || pages != 3 {
		t.Errorf("%d sandboxes in %d pages, want 20 in 3", len(seen), pages)
	}
	// Newest first.
	page, _ := c.list("limit=2&metadata=" + filter)
	if page[0].SandboxID != ours[len(ours)-1] {
		t.Errorf("first listed %s, want the newest %s", page[0].SandboxID, ours[len(ours)-1])
	}
	paused, _ := c.list("state=paused")
	if len(paused) != 1 || paused[0].SandboxID != ours[0] || paused[0].State != "paused" {
		t.Errorf("state=paused: %+v", paused)
	}
	running, a := c.list("state=running&metadata=" + filter)
	if len(running) != 19 || a.header.Get("X-Next-Token") != "" {
		t.Errorf("state=running: %d", len(running))
	}
	for _, q := range []string{"limit=0", "limit=101", "nextToken=garbage", "state=stopped", "order=up", "metadata=novalue"} {
		expect(t, q, c.bad("GET", "/v2/sandboxes?"+q, nil), 400)
	}
	// A token is for one order only.
	_, a = c.list("limit=1&order=asc")
	expect(t, "asc token in a desc list", c.do("GET", "/v2/sandboxes?nextToken="+url.QueryEscape(a.header.Get("X-Next-Token")), nil), 400)
}

// The metadata filter is unescaped three times: the SDKs escape each key
// and value, join, and form-encode the result (js-sdk sandboxApi.ts:1853-1862).
func TestListMetadataEncoding(t *testing.T) {
	srv, _ := newSim(t)
	c := newClient(t, srv)
	md := map[string]string{"k&=+ %": "v&=+ %/ü"}
	want := c.create(map[string]any{"metadata": md})
	c.create(map[string]any{"metadata": map[string]string{"k&=+ %": "v&=+ %/u"}})
	pair := url.QueryEscape(url.QueryEscape("k&=+ %")) + "=" + url.QueryEscape(url.QueryEscape("v&=+ %/ü"))
	got, _ := c.list("metadata=" + url.QueryEscape(pair))
	if len(got) != 1 || got[0].SandboxID != want {
		t.Errorf("filter found %+v, want only %s", got, want)
	}
}

// The list reads the same store as GET: a sandbox is listed as soon as
// its create answers, a pausing one as paused (handlers/sandboxes_list.go:
// 362-393, 468-472), and a killed one no more.
func TestListConsistency(t *testing.T) {
	srv, _ := newSim(t)
	c := newClient(t, srv)
	id := c.create(map[string]any{"metadata": map[string]string{"n": "1"}})
	q := "metadata=" + url.QueryEscape("n=1")
	if l, _ := c.list(q); len(l) != 1 || l[0].State != "running" {
		t.Fatalf("after create: %+v", l)
	}
	srv.HoldPauses()
	done := make(chan answer)
	go func() { done <- c.do("POST", "/sandboxes/"+id+"/pause", nil) }()
	testutil.WaitFor(t, "the pause to start", func() bool { return fate(t, srv, id).State == e2btest.StatePausing })
	if l, _ := c.list(q); len(l) != 1 || l[0].State != "paused" {
		t.Errorf("while pausing: %+v", l)
	}
	if l, _ := c.list(q + "&state=running"); len(l) != 0 {
		t.Errorf("a pausing sandbox listed as running: %+v", l)
	}
	expect(t, "pause while pausing", c.do("POST", "/sandboxes/"+id+"/pause", nil), 409)
	srv.ReleasePauses()
	expect(t, "pause", <-done, 204)
	expect(t, "kill", c.do("DELETE", "/sandboxes/"+id, nil), 204)
	if l, _ := c.list(q); len(l) != 0 {
		t.Errorf("after kill: %+v", l)
	}
}

// Pause and resume keep the id and metadata; resume of a running
// sandbox is 409; connect lengthens a running one (200) and resumes a
// paused one (201).
func TestPauseResumeConnect(t *testing.T) {
	srv, clock := newSim(t)
	c := newClient(t, srv)
	id := c.create(map[string]any{"timeout": 60, "metadata": map[string]string{"m": "1"}})
	expect(t, "resume running", c.do("POST", "/sandboxes/"+id+"/resume", map[string]any{}), 409)
	expect(t, "pause", c.do("POST", "/sandboxes/"+id+"/pause", map[string]any{"memory": true}), 204)
	clock.Advance(time.Hour)
	a := c.do("POST", "/sandboxes/"+id+"/resume", map[string]any{"timeout": 120})
	expect(t, "resume", a, 201)
	sb := fate(t, srv, id)
	if sb.State != e2btest.StateRunning || sb.Resumes != 1 || sb.Metadata["m"] != "1" || sb.EndAt.Sub(sb.StartedAt) != 2*time.Minute {
		t.Errorf("resumed: %+v", sb)
	}
	expect(t, "connect running", c.do("POST", "/sandboxes/"+id+"/connect", map[string]any{"timeout": 600}), 200)
	if sb := fate(t, srv, id); sb.EndAt.Sub(sb.StartedAt) != 10*time.Minute {
		t.Errorf("connect did not lengthen: %s", sb.EndAt.Sub(sb.StartedAt))
	}
	expect(t, "connect shorter", c.do("POST", "/sandboxes/"+id+"/connect", map[string]any{"timeout": 1}), 200)
	if sb := fate(t, srv, id); sb.EndAt.Sub(sb.StartedAt) != 10*time.Minute {
		t.Errorf("connect shortened: %s", sb.EndAt.Sub(sb.StartedAt))
	}
	expect(t, "pause", c.do("POST", "/sandboxes/"+id+"/pause", nil), 204)
	expect(t, "connect paused", c.do("POST", "/sandboxes/"+id+"/connect", map[string]any{"timeout": 60}), 201)
}

// Forks are new sandboxes with the parent's metadata, tether's included.
func TestForkInheritsMetadata(t *testing.T) {
	srv, _ := newSim(t)
	c := newClient(t, srv)
	id := c.create(map[string]any{"metadata": map[string]string{"tether-intent": "i1"}})
	a := c.do("POST", "/sandboxes/"+id+"/fork", map[string]any{"count": 2, "timeout": 60})
	expect(t, "fork", a, 201)
	var res []struct{ Sandbox struct{ SandboxID string } }
	_ = json.Unmarshal(a.body, &res)
	if len(res) != 2 {
		t.Fatalf("fork results %s", a.body)
	}
	for _, r := range res {
		sb := fate(t, srv, r.Sandbox.SandboxID)
		if sb.ForkOf != id || sb.Metadata["tether-intent"] != "i1" || sb.ID == id {
			t.Errorf("fork %+v", sb)
		}
	}
	expect(t, "pause parent", c.do("POST", "/sandboxes/"+id+"/pause", nil), 204)
	expect(t, "fork paused", c.do("POST", "/sandboxes/"+id+"/fork", nil), 409)
}

// A fork of count N answers N results, each a sandbox or the error that
// kept it from starting (sandbox_fork.go:150-185): past the team's
// concurrency, the rest are 429s. A count the team could never run at
// once is refused whole (:87-93); a lost answer leaves every fork running.
func TestForkCount(t *testing.T) {
	srv, _ := newSim(t)
	srv.AddTeam(e2btest.DefaultTeam, e2btest.Limits{Concurrency: 5})
	c := newClient(t, srv)
	id := c.create(map[string]any{"timeout": 600})
	c.create(map[string]any{"timeout": 600})
	c.create(map[string]any{"timeout": 600})
	expect(t, "count 5 of 5", c.do("POST", "/sandboxes/"+id+"/fork", map[string]any{"count": 5}), 400)
	a := c.do("POST", "/sandboxes/"+id+"/fork", map[string]any{"count": 3, "timeout": 60})
	expect(t, "count 3 with 2 slots left", a, 201)
	var res []struct {
		Sandbox *struct{ SandboxID string }
		Error   *struct{ Code int }
	}
	_ = json.Unmarshal(a.body, &res)
	if len(res) != 3 || res[0].Sandbox == nil || res[1].Sandbox == nil || res[2].Error == nil || res[2].Error.Code != 429 {
		t.Fatalf("fork results %s, want 2 sandboxes and a 429", a.body)
	}

	srv.SetFaults(e2btest.Faults{RateForkLost: 1})
	c.do("DELETE", "/sandboxes/"+res[0].Sandbox.SandboxID, nil)
	c.do("DELETE", "/sandboxes/"+res[1].Sandbox.SandboxID, nil)
	req, _ := http.NewRequest("POST", srv.URL+"/sandboxes/"+id+"/fork", strings.NewReader(`{"count":2}`))
	req.Header.Set("X-API-Key", e2btest.DefaultKey)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("a lost fork answered %d", resp.StatusCode)
	}
	lost := 0
	for _, sb := range srv.Sandboxes() {
		if sb.ForkOf == id && sb.Lost && sb.State == e2btest.StateRunning {
			lost++
		}
	}
	if lost != 2 {
		t.Errorf("%d forks running after the lost answer, want 2", lost)
	}
}

// A rate-limited route carries RateLimit-* on every answer and refuses
// with 429, Retry-After in whole seconds at least 1
// (middleware/ratelimit/ratelimit.go:126-149); GET and DELETE of one
// sandbox share a limit.
func TestRateLimit(t *testing.T) {
	srv, clock := newSim(t, e2btest.WithRateLimit(e2btest.PatternSandbox, e2btest.RateLimit{Rate: 1, Burst: 2, Period: 10 * time.Second}))
	c := newClient(t, srv)
	id := c.create(map[string]any{"timeout": 600})
	a := c.do("GET", "/sandboxes/"+id, nil)
	expect(t, "first", a, 200)
	if a.header.Get("RateLimit-Limit") != "2" || a.header.Get("RateLimit-Remaining") != "1" {
		t.Errorf("first: %v", a.header)
	}
	expect(t, "second", c.do("GET", "/sandboxes/"+id, nil), 200)
	a = c.do("DELETE", "/sandboxes/"+id, nil)
	expect(t, "third (a delete)", a, 429)
	if a.header.Get("Retry-After") != "10" || a.header.Get("RateLimit-Remaining") != "0" || a.message() != "Rate limit exceeded" {
		t.Errorf("429: %v %q", a.header, a.message())
	}
	if fate(t, srv, id).State != e2btest.StateRunning {
		t.Error("a refused delete killed the sandbox")
	}
	if a := c.do("GET", "/v2/sandboxes", nil); a.header.Get("RateLimit-Limit") != "" {
		t.Error("an unlimited route carries RateLimit headers")
	}
	clock.Advance(10 * time.Second)
	expect(t, "after the window", c.do("DELETE", "/sandboxes/"+id, nil), 204)
}

// Authentication: no key, a malformed one and an unknown one answer 401.
func TestAuth(t *testing.T) {
	srv, _ := newSim(t)
	c := newClient(t, srv)
	for _, key := range []string{"", "sk_nope", "e2b_unknown"} {
		c.key = key
		expect(t, "key "+key, c.bad("GET", "/v2/sandboxes", nil), 401)
	}
	c.key = e2btest.DefaultKey
	expect(t, "the key", c.do("GET", "/v2/sandboxes", nil), 200)
}

// A lost create makes the sandbox; a failed kill answers 500 but the
// sandbox has left the store: 404 from then on.
func TestLostCreateAndFailedKill(t *testing.T) {
	srv, _ := newSim(t)
	c := newClient(t, srv)
	srv.SetFaults(e2btest.Faults{RateCreateLost: 1, Routes: []string{e2btest.RouteCreate}})
	req, _ := http.NewRequest("POST", srv.URL+"/sandboxes", strings.NewReader(`{"templateID":"base","metadata":{"n":"lost"}}`))
	req.Header.Set("X-API-Key", e2btest.DefaultKey)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("a lost create answered %d", resp.StatusCode)
	}
	all := srv.Sandboxes()
	if len(all) != 1 || !all[0].Lost || all[0].State != e2btest.StateRunning {
		t.Fatalf("after a lost create: %+v", all)
	}
	found, _ := c.list("metadata=" + url.QueryEscape("n=lost"))
	if len(found) != 1 || found[0].SandboxID != all[0].ID {
		t.Errorf("lost create not found by metadata: %+v", found)
	}
	srv.SetFaults(e2btest.Faults{RateKillFail: 1})
	expect(t, "failed kill", c.do("DELETE", "/sandboxes/"+all[0].ID, nil), 500)
	expect(t, "after a failed kill", c.do("DELETE", "/sandboxes/"+all[0].ID, nil), 404)
	if sb := fate(t, srv, all[0].ID); !sb.Orphaned || sb.State != e2btest.StateKilled {
		t.Errorf("after a failed kill: %+v", sb)
	}
}

// Latency delays every answer in scope, and only those.
func TestLatency(t *testing.T) {
	srv, _ := newSim(t, e2btest.WithFaults(e2btest.Faults{Latency: 200 * time.Millisecond, Routes: []string{e2btest.RouteList}}))
	c := newClient(t, srv)
	start := time.Now()
	c.list("")
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("a list with 200ms latency took %s", d)
	}
	if n := srv.Calls()[e2btest.RouteList]; n != 1 {
		t.Errorf("%d list calls", n)
	}
}

// Faults drawn from a seed repeat.
func TestSeededFaultsRepeat(t *testing.T) {
	run := func() string {
		srv, _ := newSim(t)
		srv.SetFaults(e2btest.Faults{Seed: 42, Rate5xx: 0.3, Rate429: 0.2, Routes: []string{e2btest.RouteList}})
		var out []string
		for range 30 {
			req, _ := http.NewRequest("GET", srv.URL+"/v2/sandboxes", nil)
			req.Header.Set("X-API-Key", e2btest.DefaultKey)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			out = append(out, strconv.Itoa(resp.StatusCode))
		}
		return strings.Join(out, ",")
	}
	a, b := run(), run()
	if a != b {
		t.Errorf("same seed, different faults:\n%s\n%s", a, b)
	}
	if !strings.Contains(a, "500") || !strings.Contains(a, "429") || !strings.Contains(a, "200") {
		t.Errorf("faults %s", a)
	}
}

// FailNext answers the next calls of a route as told, nothing done.
func TestFailNext(t *testing.T) {
	srv, _ := newSim(t)
	c := newClient(t, srv)
	id := c.create(map[string]any{})
	srv.FailNext(e2btest.RouteKill, 500, 1)
	expect(t, "scripted", c.do("DELETE", "/sandboxes/"+id, nil), 500)
	if fate(t, srv, id).State != e2btest.StateRunning {
		t.Error("a scripted 500 killed the sandbox")
	}
	expect(t, "then", c.do("DELETE", "/sandboxes/"+id, nil), 204)
	if got := srv.CallsFor(id)[e2btest.RouteKill]; got != 2 {
		t.Errorf("CallsFor kill = %d", got)
	}
}

// A scaled clock runs timeouts faster than the wall clock.
func TestScaledClock(t *testing.T) {
	srv, _ := testutil.E2B(t, e2btest.WithClock(e2btest.ScaledClock(600)))
	sb := srv.AddSandbox(e2btest.DefaultTeam, e2btest.SeedSandbox{Timeout: 30 * time.Second})
	testutil.WaitFor(t, "a 30 s timeout at 600x", func() bool { s, _ := srv.Sandbox(sb.ID); return s.State == e2btest.StateKilled })
}

// Concurrent calls keep the record whole (run with -race).
func TestConcurrentCalls(t *testing.T) {
	srv, _ := newSim(t)
	c := newClient(t, srv)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			id := c.create(map[string]any{})
			c.do("GET", "/sandboxes/"+id, nil)
			c.do("DELETE", "/sandboxes/"+id, nil)
		})
	}
	wg.Wait()
	if n := srv.Live(); n != 0 {
		t.Errorf("%d live", n)
	}
}
