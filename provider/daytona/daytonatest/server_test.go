package daytonatest_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-run/tether/internal/testutil"

	apiclient "github.com/daytonaio/daytona/libs/api-client-go"

	"github.com/tether-run/tether/provider/daytona/daytonatest"
	"github.com/tether-run/tether/provider/internal/apispec"
)

// pollTimeout bounds every wait for a simulated state change; polls end as
// soon as the condition holds.
const pollTimeout = testutil.WaitBound

// client is the real generated Daytona client pointed at s, with every call
// checked against the official spec.
type client struct {
	api *apiclient.APIClient
	ctx context.Context
	vt  *apispec.Transport
}

func newClient(t *testing.T, s *daytonatest.Server, key string) *client {
	t.Helper()
	vt := newValidatingTransport(t, s.URL)
	cfg := apiclient.NewConfiguration()
	cfg.Servers = apiclient.ServerConfigurations{{URL: s.URL}}
	cfg.HTTPClient = &http.Client{Transport: vt}
	t.Cleanup(func() { vt.Check(t) })
	return &client{
		api: apiclient.NewAPIClient(cfg),
		ctx: context.WithValue(context.Background(), apiclient.ContextAccessToken, key),
		vt:  vt,
	}
}

func newServer(t *testing.T, opts ...daytonatest.Option) *daytonatest.Server {
	t.Helper()
	s, _ := testutil.Daytona(t, opts...)
	return s
}

func (c *client) create(t *testing.T, name string, labels map[string]string) *apiclient.Sandbox {
	t.Helper()
	req := apiclient.NewCreateSandbox()
	if name != "" {
		req.SetName(name)
	}
	if labels != nil {
		req.SetLabels(labels)
	}
	sb, resp, err := c.api.SandboxAPI.CreateSandbox(c.ctx).CreateSandbox(*req).Execute()
	if err != nil {
		t.Fatalf("create %q: %v (%s)", name, err, body(err))
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("create: status %d, want 200", resp.StatusCode)
	}
	return sb
}

func body(err error) string {
	var e *apiclient.GenericOpenAPIError
	if errors.As(err, &e) {
		return string(e.Body())
	}
	var e2 apiclient.GenericOpenAPIError
	if errors.As(err, &e2) {
		return string(e2.Body())
	}
	return ""
}

func status(resp *http.Response) int {
	if resp == nil {
		return 0
	}
	return resp.StatusCode
}

func TestCreateGetDefaults(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s, daytonatest.DefaultKey)

	sb := c.create(t, "tether-a", map[string]string{"tether-owner": "o1"})
	if sb.GetName() != "tether-a" || sb.GetOrganizationId() != daytonatest.DefaultOrg {
		t.Fatalf("name/org = %q/%q", sb.GetName(), sb.GetOrganizationId())
	}
	// The real server answers a create once the sandbox has started, but
	// with the sandbox as it was inserted: creating, desired started.
	if sb.GetState() != apiclient.SANDBOXSTATE_CREATING || sb.GetDesiredState() != apiclient.SANDBOXDESIREDSTATE_STARTED {
		t.Errorf("state after create = %q/%q, want creating/started", sb.GetState(), sb.GetDesiredState())
	}
	if got, _, err := c.api.SandboxAPI.GetSandbox(c.ctx, sb.GetId()).Execute(); err != nil || got.GetState() != apiclient.SANDBOXSTATE_STARTED {
		t.Errorf("GET after create: %v %v, want started (the answer came after the wait)", got.GetState(), err)
	}
	if sb.GetAutoStopInterval() != 15 || sb.GetAutoArchiveInterval() != 10080 || sb.GetAutoDeleteInterval() != -1 {
		t.Errorf("intervals = %v/%v/%v, want server defaults 15/10080/-1",
			sb.GetAutoStopInterval(), sb.GetAutoArchiveInterval(), sb.GetAutoDeleteInterval())
	}

	for _, key := range []string{sb.GetId(), "tether-a"} {
		got, resp, err := c.api.SandboxAPI.GetSandbox(c.ctx, key).Execute()
		if err != nil || status(resp) != 200 {
			t.Fatalf("get %s: %v %d", key, err, status(resp))
		}
		if got.GetId() != sb.GetId() || got.GetLabels()["tether-owner"] != "o1" {
			t.Errorf("get %s = %+v", key, got)
		}
	}

	// A name that is taken answers 409 with the real error body.
	req := apiclient.NewCreateSandbox()
	req.SetName("tether-a")
	_, resp, err := c.api.SandboxAPI.CreateSandbox(c.ctx).CreateSandbox(*req).Execute()
	if status(resp) != http.StatusConflict {
		t.Fatalf("duplicate create: %v %d, want 409", err, status(resp))
	}
	assertErrorBody(t, body(err), 409, "/api/sandbox")
}

func TestCreateWithoutNameUsesID(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s, daytonatest.DefaultKey)
	sb := c.create(t, "", nil)
	if sb.GetName() != sb.GetId() {
		t.Errorf("name = %q, want the id %q", sb.GetName(), sb.GetId())
	}
}

func assertErrorBody(t *testing.T, b string, code int, path string) {
	t.Helper()
	var e struct {
		StatusCode *int    `json:"statusCode"`
		Message    *string `json:"message"`
		Error      *string `json:"error"`
		Path       *string `json:"path"`
		Timestamp  *string `json:"timestamp"`
	}
	if err := json.Unmarshal([]byte(b), &e); err != nil {
		t.Fatalf("error body %q: %v", b, err)
	}
	if e.StatusCode == nil || *e.StatusCode != code || e.Message == nil || e.Error == nil || e.Path == nil || e.Timestamp == nil {
		t.Fatalf("error body %q lacks a field of {statusCode, message, error, path, timestamp}", b)
	}
	if *e.Path != path {
		t.Errorf("error path = %q, want %q", *e.Path, path)
	}
	if _, err := time.Parse(time.RFC3339, *e.Timestamp); err != nil {
		t.Errorf("error timestamp %q: %v", *e.Timestamp, err)
	}
}

func TestUnauthorized(t *testing.T) {
	s := newServer(t)
	for _, key := range []string{"", "wrong-key"} {
		c := newClient(t, s, key)
		_, resp, err := c.api.SandboxAPI.ListSandboxes(c.ctx).Execute()
		if status(resp) != http.StatusUnauthorized {
			t.Fatalf("key %q: %v %d, want 401", key, err, status(resp))
		}
		assertErrorBody(t, body(err), 401, "/api/sandbox")
	}
	s.AddKey("k2", "org-2")
	s.RemoveKey("k2")
	c := newClient(t, s, "k2")
	if _, resp, _ := c.api.SandboxAPI.ListSandboxes(c.ctx).Execute(); status(resp) != 401 {
		t.Fatalf("revoked key: status %d, want 401", status(resp))
	}
}

func TestOrganizationsAreSeparate(t *testing.T) {
	s := newServer(t)
	s.AddKey("key-2", "org-2")
	c1 := newClient(t, s, daytonatest.DefaultKey)
	c2 := newClient(t, s, "key-2")

	a := c1.create(t, "same-name", map[string]string{"k": "1"})
	b := c2.create(t, "same-name", map[string]string{"k": "2"}) // names are per organization
	if a.GetId() == b.GetId() {
		t.Fatal("two organizations share a sandbox")
	}
	// The other organization's sandbox is invisible by id, by name and in lists.
	got, resp, err := c2.api.SandboxAPI.GetSandbox(c2.ctx, a.GetId()).Execute()
	if status(resp) != 404 {
		t.Fatalf("org-2 reads org-1's sandbox by id: %v %v %d", got, err, status(resp))
	}
	got, _, err = c2.api.SandboxAPI.GetSandbox(c2.ctx, "same-name").Execute()
	if err != nil || got.GetId() != b.GetId() {
		t.Fatalf("org-2 by name = %v, %v; want its own", got.GetId(), err)
	}
	if _, resp, _ := c2.api.SandboxAPI.DeleteSandbox(c2.ctx, a.GetId()).Execute(); status(resp) != 404 {
		t.Fatalf("org-2 deletes org-1's sandbox: status %d", status(resp))
	}
	list, _, err := c2.api.SandboxAPI.ListSandboxes(c2.ctx).Execute()
	if err != nil || len(list.GetItems()) != 1 || list.GetItems()[0].GetId() != b.GetId() {
		t.Fatalf("org-2 list = %+v, %v", list, err)
	}
}

func TestJWTSelectsOrganization(t *testing.T) {
	s := newServer(t)
	s.AddJWT("jwt-1", "org-9")
	c := newClient(t, s, "jwt-1")
	if _, resp, _ := c.api.SandboxAPI.ListSandboxes(c.ctx).Execute(); status(resp) != http.StatusForbidden {
		t.Fatalf("JWT without organization header: status %d, want 403", status(resp))
	}
	_, resp, err := c.api.SandboxAPI.ListSandboxes(c.ctx).XDaytonaOrganizationID("org-9").Execute()
	if err != nil || status(resp) != 200 {
		t.Fatalf("JWT with organization: %v %d", err, status(resp))
	}
}

func TestGetPrefersIDOverName(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s, daytonatest.DefaultKey)
	first := c.create(t, "alpha", nil)
	// A second sandbox whose name is the first one's id.
	c.create(t, first.GetId(), nil)
	got, _, err := c.api.SandboxAPI.GetSandbox(c.ctx, first.GetId()).Execute()
	if err != nil || got.GetId() != first.GetId() {
		t.Fatalf("get by id resolved %v, %v; want the id match", got.GetId(), err)
	}
}

func TestDeleteIsAsyncAndFreesTheName(t *testing.T) {
	s := newServer(t, daytonatest.WithDestroyDelay(time.Hour))
	c := newClient(t, s, daytonatest.DefaultKey)
	sb := c.create(t, "tether-del", nil)

	before := time.Now().UnixMilli()
	got, resp, err := c.api.SandboxAPI.DeleteSandbox(c.ctx, sb.GetId()).Execute()
	if err != nil || status(resp) != 200 {
		t.Fatalf("delete: %v %d", err, status(resp))
	}
	// The answer shows the rename at once, but not yet a new state: the
	// destroy action runs after the answer (sandbox.service.ts:2031-2039).
	if got.GetState() != apiclient.SANDBOXSTATE_STARTED || got.GetDesiredState() != apiclient.SANDBOXDESIREDSTATE_DESTROYED {
		t.Errorf("state after delete = %q (desired %q), want started (desired destroyed)", got.GetState(), got.GetDesiredState())
	}
	if !strings.HasPrefix(got.GetName(), "DESTROYED_tether-del_") {
		t.Errorf("name after delete = %q, want DESTROYED_tether-del_<unixms>", got.GetName())
	}
	ms := strings.TrimPrefix(got.GetName(), "DESTROYED_tether-del_")
	if n, err := json.Number(ms).Int64(); err != nil || n < before || n > time.Now().UnixMilli() {
		t.Errorf("rename suffix %q is not the deletion's unix ms", ms)
	}
	// The name is free at once: GET by name is 404 and it can be created again.
	if _, resp, _ := c.api.SandboxAPI.GetSandbox(c.ctx, "tether-del").Execute(); status(resp) != 404 {
		t.Errorf("get old name while destroying: %d, want 404", status(resp))
	}
	again := c.create(t, "tether-del", nil)
	// The id still answers, destroying, until the runner is done.
	got, _, err = c.api.SandboxAPI.GetSandbox(c.ctx, sb.GetId()).Execute()
	if err != nil || got.GetState() != apiclient.SANDBOXSTATE_DESTROYING {
		t.Fatalf("get by id while destroying: %v %v", got.GetState(), err)
	}
	// Deleting again while the first delete is under way is refused: the
	// sandbox is pending (sandbox.service.ts:2016-2018).
	if _, resp, err := c.api.SandboxAPI.DeleteSandbox(c.ctx, sb.GetId()).Execute(); status(resp) != 409 {
		t.Fatalf("second delete: %v %d, want 409", err, status(resp))
	}
	if err := s.Release(sb.GetId()); err != nil { // let destroying finish now
		t.Fatal(err)
	}
	testutil.WaitFor(t, "404 after destroy", func() bool {
		_, resp, _ := c.api.SandboxAPI.GetSandbox(c.ctx, sb.GetId()).Execute()
		return status(resp) == 404
	})
	// The simulator still remembers it for assertions.
	rec, ok := s.Sandbox(sb.GetId())
	if !ok || rec.State != "destroyed" || !rec.DeleteRequested {
		t.Errorf("introspection = %+v, %v", rec, ok)
	}
	if got, _, err := c.api.SandboxAPI.GetSandbox(c.ctx, "tether-del").Execute(); err != nil || got.GetId() != again.GetId() {
		t.Errorf("new sandbox by name = %v, %v", got.GetId(), err)
	}
}

func TestStopStartAndStateConflicts(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s, daytonatest.DefaultKey)
	sb := c.create(t, "tether-stop", nil)
	id := sb.GetId()

	// A state change in progress refuses stop, start and delete with 409.
	if err := s.Hold(id, "starting", 0); err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() (*http.Response, error){
		"stop": func() (*http.Response, error) {
			_, r, e := c.api.SandboxAPI.StopSandbox(c.ctx, id).Execute()
			return r, e
		},
		"start": func() (*http.Response, error) {
			_, r, e := c.api.SandboxAPI.StartSandbox(c.ctx, id).Execute()
			return r, e
		},
		"delete": func() (*http.Response, error) {
			_, r, e := c.api.SandboxAPI.DeleteSandbox(c.ctx, id).Execute()
			return r, e
		},
	} {
		resp, err := call()
		if status(resp) != http.StatusConflict {
			t.Fatalf("%s while starting: %v %d, want 409", name, err, status(resp))
		}
		path := "/api/sandbox/" + id
		if name != "delete" {
			path += "/" + name
		}
		assertErrorBody(t, body(err), 409, path)
	}
	if err := s.Release(id); err != nil {
		t.Fatal(err)
	}

	got, resp, err := c.api.SandboxAPI.StopSandbox(c.ctx, id).Execute()
	if err != nil || status(resp) != 200 || got.GetState() != apiclient.SANDBOXSTATE_STOPPING {
		t.Fatalf("stop: %v %d %v", err, status(resp), got.GetState())
	}
	testutil.WaitFor(t, "stopped", func() bool {
		got, _, _ := c.api.SandboxAPI.GetSandbox(c.ctx, id).Execute()
		return got != nil && got.GetState() == apiclient.SANDBOXSTATE_STOPPED
	})
	got, resp, err = c.api.SandboxAPI.StartSandbox(c.ctx, id).Execute()
	if err != nil || status(resp) != 200 {
		t.Fatalf("start: %v %d", err, status(resp))
	}
	testutil.WaitFor(t, "started", func() bool {
		got, _, _ := c.api.SandboxAPI.GetSandbox(c.ctx, id).Execute()
		return got != nil && got.GetState() == apiclient.SANDBOXSTATE_STARTED
	})
}

func TestIntervalSetters(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s, daytonatest.DefaultKey)
	sb := c.create(t, "tether-iv", nil)
	id := sb.GetId()

	got, resp, err := c.api.SandboxAPI.SetAutostopInterval(c.ctx, id, 0).Execute()
	if err != nil || status(resp) != http.StatusCreated || got.GetAutoStopInterval() != 0 {
		t.Fatalf("autostop 0: %v %d %v", err, status(resp), got.GetAutoStopInterval())
	}
	got, resp, err = c.api.SandboxAPI.SetAutostopInterval(c.ctx, id, 20).Execute()
	if err != nil || status(resp) != http.StatusCreated || got.GetAutoStopInterval() != 20 {
		t.Fatalf("autostop 20: %v %d %v", err, status(resp), got.GetAutoStopInterval())
	}
	if _, resp, _ := c.api.SandboxAPI.SetAutostopInterval(c.ctx, id, -1).Execute(); status(resp) != 400 {
		t.Errorf("autostop -1: status %d, want 400", status(resp))
	}
	got, resp, err = c.api.SandboxAPI.SetAutoArchiveInterval(c.ctx, id, 60).Execute()
	if err != nil || status(resp) != http.StatusCreated || got.GetAutoArchiveInterval() != 60 {
		t.Fatalf("autoarchive: %v %d", err, status(resp))
	}
	got, resp, err = c.api.SandboxAPI.SetAutoDeleteInterval(c.ctx, id, 30).Execute()
	if err != nil || status(resp) != http.StatusCreated || got.GetAutoDeleteInterval() != 30 {
		t.Fatalf("autodelete: %v %d", err, status(resp))
	}
	if rec, _ := s.Sandbox(id); rec.AutoStopInterval != 20 || rec.AutoArchiveInterval != 60 || rec.AutoDeleteInterval != 30 {
		t.Errorf("introspection = %+v", rec)
	}
	if _, resp, _ := c.api.SandboxAPI.SetAutostopInterval(c.ctx, "no-such", 5).Execute(); status(resp) != 404 {
		t.Errorf("autostop unknown: status %d, want 404", status(resp))
	}
}

// Auto-delete 0 ("ephemeral") deletes only on stop: with auto-stop off too, a leaked sandbox lives forever.
func TestEphemeralDeletesOnStop(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s, daytonatest.DefaultKey)
	req := apiclient.NewCreateSandbox()
	req.SetName("eph")
	req.SetAutoStopInterval(0)
	req.SetAutoDeleteInterval(0)
	sb, _, err := c.api.SandboxAPI.CreateSandbox(c.ctx).CreateSandbox(*req).Execute()
	if err != nil {
		t.Fatal(err)
	}
	if sb.GetAutoStopInterval() != 0 || sb.GetAutoDeleteInterval() != 0 {
		t.Fatalf("intervals = %v/%v, want 0/0 as asked", sb.GetAutoStopInterval(), sb.GetAutoDeleteInterval())
	}
	// Running, it stays: nothing deletes an ephemeral sandbox that never stops.
	if rec, _ := s.Sandbox(sb.GetId()); rec.State != "started" {
		t.Fatalf("state = %s", rec.State)
	}
	if _, _, err := c.api.SandboxAPI.StopSandbox(c.ctx, sb.GetId()).Execute(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "ephemeral sandbox deleted after stop", func() bool {
		rec, _ := s.Sandbox(sb.GetId())
		return rec.State == "destroyed" && rec.DeleteRequested
	})
}

func TestReplaceLabels(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s, daytonatest.DefaultKey)
	sb := c.create(t, "tether-l", map[string]string{"a": "1"})
	got, resp, err := c.api.SandboxAPI.ReplaceLabels(c.ctx, sb.GetId()).
		SandboxLabels(*apiclient.NewSandboxLabels(map[string]string{"b": "2"})).Execute()
	if err != nil || status(resp) != 200 || got.GetLabels()["b"] != "2" || len(got.GetLabels()) != 1 {
		t.Fatalf("replace labels: %v %d %v", err, status(resp), got)
	}
	rec, _ := s.Sandbox(sb.GetId())
	if len(rec.Labels) != 1 || rec.Labels["b"] != "2" {
		t.Errorf("labels = %v", rec.Labels)
	}
}

func TestListFiltersAndPages(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s, daytonatest.DefaultKey)
	want := map[string]bool{}
	for i := range 7 {
		labels := map[string]string{"scope": "a", "n": string(rune('0' + i))}
		if i%2 == 1 {
			labels["scope"] = "b"
		}
		sb := c.create(t, "", labels)
		if labels["scope"] == "a" {
			want[sb.GetId()] = true
		}
	}
	c.create(t, "", nil)

	got := map[string]bool{}
	cursor := ""
	pages := 0
	for {
		req := c.api.SandboxAPI.ListSandboxes(c.ctx).Labels(`{"scope":"a"}`).Limit(2)
		if cursor != "" {
			req = req.Cursor(cursor)
		}
		page, resp, err := req.Execute()
		if err != nil || status(resp) != 200 {
			t.Fatalf("list: %v %d", err, status(resp))
		}
		pages++
		if len(page.GetItems()) > 2 {
			t.Fatalf("page of %d items, limit 2", len(page.GetItems()))
		}
		for _, it := range page.GetItems() {
			if got[it.GetId()] {
				t.Fatalf("item %s on two pages", it.GetId())
			}
			got[it.GetId()] = true
		}
		next, ok := page.GetNextCursorOk()
		if !ok || next == nil || *next == "" {
			break
		}
		cursor = *next
	}
	if len(got) != len(want) || pages != 2 {
		t.Fatalf("listed %d sandboxes on %d pages, want %d on 2", len(got), pages, len(want))
	}
	for id := range want {
		if !got[id] {
			t.Errorf("missing %s", id)
		}
	}

	// Every pair must match: a pair that no sandbox has matches nothing.
	page, _, err := c.api.SandboxAPI.ListSandboxes(c.ctx).Labels(`{"scope":"a","n":"9"}`).Execute()
	if err != nil || len(page.GetItems()) != 0 {
		t.Fatalf("list with unmatched pair: %v %v", page, err)
	}
	// Labels that are not JSON are refused.
	if _, resp, _ := c.api.SandboxAPI.ListSandboxes(c.ctx).Labels(`scope=a`).Execute(); status(resp) != 400 {
		t.Errorf("list with bad labels: status %d, want 400", status(resp))
	}
	// A bad cursor is refused.
	if _, resp, _ := c.api.SandboxAPI.ListSandboxes(c.ctx).Cursor("!!").Execute(); status(resp) != 400 {
		t.Errorf("list with bad cursor: status %d, want 400", status(resp))
	}
}

// fakeClock is a hand-moved clock for the simulator's state changes.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestListLagsBehind(t *testing.T) {
	clk := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := newServer(t, daytonatest.WithClock(clk.Now), daytonatest.WithListLag(5*time.Second),
		daytonatest.WithCreateDelay(0), daytonatest.WithDestroyDelay(time.Second))
	c := newClient(t, s, daytonatest.DefaultKey)
	count := func() int {
		t.Helper()
		page, _, err := c.api.SandboxAPI.ListSandboxes(c.ctx).Execute()
		if err != nil {
			t.Fatal(err)
		}
		return len(page.GetItems())
	}
	sb := c.create(t, "lagging", nil)
	if n := count(); n != 0 {
		t.Fatalf("a new sandbox is listed at once despite the lag: %d items", n)
	}
	// GET is consistent even while the list lags.
	if _, resp, _ := c.api.SandboxAPI.GetSandbox(c.ctx, sb.GetId()).Execute(); status(resp) != 200 {
		t.Fatalf("get: %d", status(resp))
	}
	clk.Add(6 * time.Second)
	if n := count(); n != 1 {
		t.Fatalf("after the lag: %d items, want 1", n)
	}
	if _, _, err := c.api.SandboxAPI.DeleteSandbox(c.ctx, sb.GetId()).Execute(); err != nil {
		t.Fatal(err)
	}
	clk.Add(2 * time.Second) // destroyed by now, but the list still shows it
	if _, resp, _ := c.api.SandboxAPI.GetSandbox(c.ctx, sb.GetId()).Execute(); status(resp) != 404 {
		t.Fatalf("get after destroy: %d, want 404", status(resp))
	}
	page, _, _ := c.api.SandboxAPI.ListSandboxes(c.ctx).Execute()
	if len(page.GetItems()) != 1 || page.GetItems()[0].GetName() != "lagging" {
		t.Fatalf("lagging list = %+v, want the sandbox as it was before the delete", page.GetItems())
	}
	clk.Add(5 * time.Second)
	if n := count(); n != 0 {
		t.Fatalf("deleted sandbox still listed after the lag: %d items", n)
	}
}

func mustSandbox(t *testing.T, s *daytonatest.Server, id string) daytonatest.Sandbox {
	t.Helper()
	sb, ok := s.Sandbox(id)
	if !ok {
		t.Fatalf("no sandbox %s", id)
	}
	return sb
}

// The validator itself must catch a response the spec forbids, or the
// other tests prove nothing.
func TestValidatorCatchesMissingField(t *testing.T) {
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"x","name":"x"}`))
	}))
	defer fake.Close()
	vt := newValidatingTransport(t, fake.URL+"/api")
	req, _ := http.NewRequest("GET", fake.URL+"/api/sandbox/x", nil)
	resp, err := vt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(vt.Failures()) == 0 {
		t.Fatal("a Sandbox without its required fields passed validation")
	}
}

func TestUnknownRoute(t *testing.T) {
	s := newServer(t)
	req, _ := http.NewRequest("GET", s.URL+"/nothing-here", nil)
	req.Header.Set("Authorization", "Bearer "+daytonatest.DefaultKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 404 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	assertErrorBody(t, string(b), 404, "/api/nothing-here")
	if s.Calls()[daytonatest.RouteUnknown] != 1 {
		t.Errorf("calls = %v", s.Calls())
	}
}

func TestBadRequests(t *testing.T) {
	s := newServer(t)
	for _, tt := range []struct{ method, path, body string }{
		{"POST", "/sandbox", `{"name":`},
		{"POST", "/sandbox", ``},
		{"POST", "/sandbox", `{"autoStopInterval":-1}`},
		{"POST", "/sandbox", `{"labels":{"a":1}}`},
		{"PUT", "/sandbox/x/labels", `{}`},
		{"POST", "/sandbox/x/autostop/abc", ``},
		{"POST", "/sandbox/x/autostop/1.5", ``},
		{"GET", "/sandbox?limit=0", ``},
		{"GET", "/sandbox?limit=201", ``},
		{"GET", "/sandbox?sort=state", ``},
		{"GET", "/sandbox?order=up", ``},
	} {
		req, _ := http.NewRequest(tt.method, s.URL+tt.path, strings.NewReader(tt.body))
		req.Header.Set("Authorization", "Bearer "+daytonatest.DefaultKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("%s %s %s: status %d, want 400", tt.method, tt.path, tt.body, resp.StatusCode)
			continue
		}
		assertErrorBody(t, string(b), 400, "/api"+strings.Split(tt.path, "?")[0])
	}
	if n := len(s.Sandboxes()); n != 0 {
		t.Errorf("a bad request created %d sandboxes", n)
	}
}
