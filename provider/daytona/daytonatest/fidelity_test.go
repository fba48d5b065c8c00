package daytonatest_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	apiclient "github.com/daytonaio/daytona/libs/api-client-go"

	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// createWith creates a sandbox from req and fails the test on any error.
func (c *client) createWith(t *testing.T, req *apiclient.CreateSandbox) *apiclient.Sandbox {
	t.Helper()
	sb, resp, err := c.api.SandboxAPI.CreateSandbox(c.ctx).CreateSandbox(*req).Execute()
	if err != nil || status(resp) != http.StatusOK {
		t.Fatalf("create: %d %v (%s)", status(resp), err, body(err))
	}
	return sb
}

func waitState(t *testing.T, s *daytonatest.Server, id, state string) {
	t.Helper()
	testutil.WaitFor(t, id+" "+state, func() bool {
		sb, _ := s.Sandbox(id)
		return sb.State == state
	})
}

// wantError checks a refused call's status and the message in its body.
func wantError(t *testing.T, what string, resp *http.Response, err error, code int, msg string) {
	t.Helper()
	if status(resp) != code || !strings.Contains(body(err), msg) {
		t.Fatalf("%s: %d %s, want %d %q", what, status(resp), body(err), code, msg)
	}
}

// PUT /sandbox/{id}/labels replaces every label, and the answer is the
// whole sandbox, which the official client still decodes as SandboxLabels.
func TestReplaceLabelsIsAFullReplace(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s, daytonatest.DefaultKey)
	sb := c.create(t, "full", map[string]string{"tether-owner": "o1", "tether-scope": "s1", "a": "1"})
	got, resp, err := c.api.SandboxAPI.ReplaceLabels(c.ctx, "full").
		SandboxLabels(*apiclient.NewSandboxLabels(map[string]string{"b": "2"})).Execute()
	if err != nil || status(resp) != http.StatusOK {
		t.Fatalf("replace: %d %v", status(resp), err)
	}
	if len(got.GetLabels()) != 1 || got.GetLabels()["b"] != "2" {
		t.Errorf("answer labels %v, want only b", got.GetLabels())
	}
	if got.AdditionalProperties["id"] != sb.GetId() || got.AdditionalProperties["state"] == nil {
		t.Errorf("answer %v, want the whole sandbox", got.AdditionalProperties)
	}
	if rec := mustSandbox(t, s, sb.GetId()); len(rec.Labels) != 1 || rec.Labels["b"] != "2" {
		t.Errorf("stored labels %v, want only b", rec.Labels)
	}
}

// Fork: VM classes only, a started settled parent, no GPU; the fork copies
// labels and intervals, answers at once in creating, and the parent cannot
// be deleted while it lives.
func TestFork(t *testing.T) {
	s := newServer(t, daytonatest.WithSnapshotClass("vm", daytonatest.ClassLinuxVM))
	c := newClient(t, s, daytonatest.DefaultKey)
	fork := func(id, name string) (*apiclient.Sandbox, *http.Response, error) {
		req := apiclient.NewForkSandbox()
		if name != "" {
			req.SetName(name)
		}
		return c.api.SandboxAPI.ForkSandbox(c.ctx, id).ForkSandbox(*req).Execute()
	}

	box := c.create(t, "box", nil)
	_, resp, err := fork(box.GetId(), "")
	wantError(t, "fork of a container", resp, err, http.StatusUnprocessableEntity, "Forking is not supported for this sandbox")

	req := apiclient.NewCreateSandbox()
	req.SetName("parent")
	req.SetSnapshot("vm")
	req.SetLabels(map[string]string{"tether-owner": "o1", "k": "v"})
	req.SetAutoStopInterval(5)
	req.SetAutoArchiveInterval(60)
	req.SetAutoDeleteInterval(30)
	parent := c.createWith(t, req)
	if parent.GetSandboxClass() != string(apiclient.SANDBOXCLASS_LINUX_VM) {
		t.Fatalf("class %q, want linux-vm from the snapshot", parent.GetSandboxClass())
	}

	f1, resp, err := fork(parent.GetId(), "f1")
	if err != nil || status(resp) != http.StatusOK {
		t.Fatalf("fork: %d %s", status(resp), body(err))
	}
	if f1.GetName() != "f1" || f1.GetState() != apiclient.SANDBOXSTATE_CREATING || f1.GetId() == parent.GetId() {
		t.Errorf("fork answer %s/%s, want f1 creating with its own id", f1.GetName(), f1.GetState())
	}
	if f1.GetLabels()["tether-owner"] != "o1" || f1.GetLabels()["k"] != "v" || len(f1.GetLabels()) != 2 {
		t.Errorf("fork labels %v, want the parent's", f1.GetLabels())
	}
	if f1.GetAutoStopInterval() != 5 || f1.GetAutoArchiveInterval() != 60 || f1.GetAutoDeleteInterval() != 30 {
		t.Errorf("fork intervals %v/%v/%v, want the parent's 5/60/30",
			f1.GetAutoStopInterval(), f1.GetAutoArchiveInterval(), f1.GetAutoDeleteInterval())
	}
	if rec := mustSandbox(t, s, f1.GetId()); rec.ForkOf != parent.GetId() || rec.Class != daytonatest.ClassLinuxVM {
		t.Errorf("fork record %+v", rec)
	}
	// The parent is forking until its runner has copied it, then started.
	if st := mustSandbox(t, s, parent.GetId()); st.State != "forking" && st.State != "started" {
		t.Errorf("parent after the fork: %s", st.State)
	}
	waitState(t, s, parent.GetId(), "started")
	waitState(t, s, f1.GetId(), "started")

	// Unnamed: named after its id. A taken name: 409, nothing stored.
	f2, _, err := fork(parent.GetId(), "")
	if err != nil || f2.GetName() != f2.GetId() {
		t.Fatalf("unnamed fork: %v %s", err, body(err))
	}
	waitState(t, s, parent.GetId(), "started")
	n := len(s.Sandboxes())
	_, resp, err = fork(parent.GetId(), "f1")
	wantError(t, "fork to a taken name", resp, err, http.StatusConflict, "Sandbox with this name already exists")
	if len(s.Sandboxes()) != n || mustSandbox(t, s, parent.GetId()).State != "started" {
		t.Errorf("a refused fork stored something or moved the parent")
	}

	// The parent's delete is refused while a fork lives.
	_, resp, err = c.api.SandboxAPI.DeleteSandbox(c.ctx, parent.GetId()).Execute()
	wantError(t, "delete of a parent", resp, err, http.StatusBadRequest, "Cannot delete sandbox which has active fork children")
	for _, id := range []string{f1.GetId(), f2.GetId()} {
		waitState(t, s, id, "started")
		if _, resp, err := c.api.SandboxAPI.DeleteSandbox(c.ctx, id).Execute(); status(resp) != http.StatusOK {
			t.Fatalf("delete fork: %d %v", status(resp), err)
		}
	}
	if _, resp, err := c.api.SandboxAPI.DeleteSandbox(c.ctx, parent.GetId()).Execute(); status(resp) != http.StatusOK {
		t.Fatalf("delete of the parent once its forks are deleted: %d %s", status(resp), body(err))
	}

	stopped := seedIn(t, s, daytonatest.SeedSandbox{Name: "stopped-vm", Class: daytonatest.ClassLinuxVM, State: "stopped"})
	_, resp, err = fork(stopped.ID, "")
	wantError(t, "fork of a stopped sandbox", resp, err, http.StatusBadRequest, "Sandbox must be in started state to fork")
	gpu := seedIn(t, s, daytonatest.SeedSandbox{Name: "gpu-vm", Class: daytonatest.ClassWindows, GPU: 1, AutoDeleteInterval: intp(0)})
	_, resp, err = fork(gpu.ID, "")
	wantError(t, "fork of a GPU sandbox", resp, err, http.StatusUnprocessableEntity, "Forking is not supported for GPU sandboxes")
	_, resp, err = fork("no-such", "")
	wantError(t, "fork of nothing", resp, err, http.StatusNotFound, "not found")
}

// Archive: a stopped, settled, non-ephemeral sandbox; archived, it starts
// again through restoring, and a delete takes it at once.
func TestArchive(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s, daytonatest.DefaultKey)
	sb := c.create(t, "arch", nil)
	id := sb.GetId()
	waitState(t, s, id, "started")
	_, resp, err := c.api.SandboxAPI.ArchiveSandbox(c.ctx, id).Execute()
	wantError(t, "archive of a started sandbox", resp, err, http.StatusBadRequest, "Sandbox is not stopped")

	if _, _, err := c.api.SandboxAPI.StopSandbox(c.ctx, id).Execute(); err != nil {
		t.Fatal(body(err))
	}
	waitState(t, s, id, "stopped")
	got, resp, err := c.api.SandboxAPI.ArchiveSandbox(c.ctx, id).Execute()
	if err != nil || status(resp) != http.StatusOK {
		t.Fatalf("archive: %d %s", status(resp), body(err))
	}
	if got.GetState() != apiclient.SANDBOXSTATE_ARCHIVING || got.GetDesiredState() != apiclient.SANDBOXDESIREDSTATE_ARCHIVED {
		t.Errorf("archive answer %s/%s, want archiving/archived", got.GetState(), got.GetDesiredState())
	}
	waitState(t, s, id, "archived")
	if _, _, err := c.api.SandboxAPI.StartSandbox(c.ctx, id).Execute(); err != nil {
		t.Fatalf("start of an archived sandbox: %s", body(err))
	}
	waitState(t, s, id, "started")

	eph := seedIn(t, s, daytonatest.SeedSandbox{Name: "eph", State: "stopped", AutoDeleteInterval: intp(0)})
	_, resp, err = c.api.SandboxAPI.ArchiveSandbox(c.ctx, eph.ID).Execute()
	wantError(t, "archive of an ephemeral sandbox", resp, err, http.StatusBadRequest, "Ephemeral sandboxes cannot be archived")
	if rec := mustSandbox(t, s, eph.ID); rec.State != "stopped" {
		t.Errorf("refused archive moved it to %s", rec.State)
	}

	old := seedIn(t, s, daytonatest.SeedSandbox{Name: "old", State: "archived"})
	if _, resp, err := c.api.SandboxAPI.DeleteSandbox(c.ctx, old.ID).Execute(); status(resp) != http.StatusOK {
		t.Fatalf("delete of an archived sandbox: %d %s", status(resp), body(err))
	}
	waitState(t, s, old.ID, "destroyed")
}

// The auto-archive check archives an idle stopped sandbox; the auto-delete
// check never takes an archived one.
func TestAutoArchiveAndNoAutoDeleteOfArchived(t *testing.T) {
	s, clock := timerServer(t)
	sb := seedIn(t, s, daytonatest.SeedSandbox{Name: "idle", State: "stopped",
		AutoArchiveInterval: intp(2), AutoDeleteInterval: intp(5)})
	start := clock.Now()
	clock.Add(2 * time.Minute)
	if got := mustSandbox(t, s, sb.ID).State; got != "stopped" {
		t.Fatalf("at the deadline: %s, want stopped", got)
	}
	clock.Add(time.Minute)
	if got := mustSandbox(t, s, sb.ID).State; got != "archived" {
		t.Fatalf("a minute after the deadline: %s, want archived", got)
	}
	clock.Add(30 * 24 * time.Hour)
	if got := mustSandbox(t, s, sb.ID); got.State != "archived" || got.DeleteRequested {
		t.Fatalf("a month later: %s (delete requested %v), want archived and kept", got.State, got.DeleteRequested)
	}
	ev := timerEvents(s, sb.ID)
	if len(ev) != 1 || ev[0].Kind != daytonatest.TimerAutoArchive {
		t.Fatalf("timer events %+v, want one auto-archive", ev)
	}
	if want := start.Add(2*time.Minute + 10*time.Second); !ev[0].At.Equal(want) {
		t.Fatalf("auto-archive ran at %s, want the check after the deadline, %s", ev[0].At, want)
	}
}

// The interval setters as the server has them: auto-archive 0 or above
// the maximum is the maximum; auto-delete is refused on a GPU sandbox,
// which also cannot be created other than ephemeral.
func TestIntervalSettersFollowTheServer(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s, daytonatest.DefaultKey)
	sb := c.create(t, "iv", nil)
	for _, tc := range []struct{ asked, want int32 }{{0, 43200}, {100000, 43200}, {90, 90}} {
		got, resp, err := c.api.SandboxAPI.SetAutoArchiveInterval(c.ctx, sb.GetId(), float32(tc.asked)).Execute()
		if err != nil || status(resp) != http.StatusCreated || got.GetAutoArchiveInterval() != float32(tc.want) {
			t.Errorf("autoarchive %d: %d %v %v, want %d", tc.asked, status(resp), got.GetAutoArchiveInterval(), err, tc.want)
		}
	}
	if got, _, err := c.api.SandboxAPI.SetAutostopInterval(c.ctx, sb.GetId(), 0).Execute(); err != nil || got.GetAutoStopInterval() != 0 {
		t.Errorf("autostop 0: %v %v", got.GetAutoStopInterval(), err)
	}
	if got, _, err := c.api.SandboxAPI.SetAutoDeleteInterval(c.ctx, sb.GetId(), 0).Execute(); err != nil || got.GetAutoDeleteInterval() != 0 {
		t.Errorf("autodelete 0: %v %v", got.GetAutoDeleteInterval(), err)
	}

	gpu := seedIn(t, s, daytonatest.SeedSandbox{Name: "gpu", GPU: 1, AutoDeleteInterval: intp(0)})
	_, resp, err := c.api.SandboxAPI.SetAutoDeleteInterval(c.ctx, gpu.ID, 60).Execute()
	wantError(t, "autodelete on a GPU sandbox", resp, err, http.StatusBadRequest, "GPU sandboxes must remain ephemeral")
	if rec := mustSandbox(t, s, gpu.ID); rec.AutoDeleteInterval != 0 {
		t.Errorf("GPU sandbox auto-delete %d after a refused setter", rec.AutoDeleteInterval)
	}
	if _, resp, err := c.api.SandboxAPI.SetAutostopInterval(c.ctx, gpu.ID, 0).Execute(); status(resp) != http.StatusCreated {
		t.Errorf("autostop on a GPU sandbox: %d %v", status(resp), err)
	}
}

// An ephemeral sandbox is deleted by its stop: the name is free at once,
// a start meanwhile is refused, and afterwards it is not found.
func TestEphemeralStopThenStart(t *testing.T) {
	s := newServer(t, daytonatest.WithDestroyDelay(time.Hour))
	c := newClient(t, s, daytonatest.DefaultKey)
	req := apiclient.NewCreateSandbox()
	req.SetName("eph")
	req.SetAutoDeleteInterval(0)
	sb := c.createWith(t, req)
	waitState(t, s, sb.GetId(), "started")
	got, resp, err := c.api.SandboxAPI.StopSandbox(c.ctx, "eph").Execute()
	if err != nil || status(resp) != http.StatusOK || got.GetDesiredState() != apiclient.SANDBOXDESIREDSTATE_DESTROYED {
		t.Fatalf("stop: %d %v %s", status(resp), got.GetDesiredState(), body(err))
	}
	_, resp, err = c.api.SandboxAPI.StartSandbox(c.ctx, "eph").Execute()
	wantError(t, "start by name after the stop", resp, err, http.StatusNotFound, "not found")
	_, resp, err = c.api.SandboxAPI.StartSandbox(c.ctx, sb.GetId()).Execute()
	wantError(t, "start by id while it is destroyed", resp, err, http.StatusConflict, "state change in progress")
	if rec := mustSandbox(t, s, sb.GetId()); !rec.DeleteRequested {
		t.Fatalf("record %+v, want deleted by its stop", rec)
	}
}

// POST /sandbox/{id}/last-activity answers 201 for a destroyed sandbox
// until the server drops its row, 24 h after it was destroyed; by the name
// it had it is 404 at once (the delete renamed it).
func TestLastActivityOfDestroyedSandbox(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	s := newServer(t, daytonatest.WithClock(clock.Now))
	c := newClient(t, s, daytonatest.DefaultKey)
	sb := seedIn(t, s, daytonatest.SeedSandbox{Name: "gone"})
	broken := seedIn(t, s, daytonatest.SeedSandbox{Name: "broken", State: "error"})
	other, err := s.AddSandbox("org-2", daytonatest.SeedSandbox{Name: "theirs"})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{sb.ID, broken.ID} {
		if _, resp, err := c.api.SandboxAPI.DeleteSandbox(c.ctx, id).Execute(); status(resp) != http.StatusOK {
			t.Fatalf("delete: %d %v", status(resp), err)
		}
	}
	clock.Add(time.Second)
	rec := mustSandbox(t, s, sb.ID)
	if rec.State != "destroyed" {
		t.Fatalf("state %s, want destroyed", rec.State)
	}
	if _, resp, _ := c.api.SandboxAPI.GetSandbox(c.ctx, sb.ID).Execute(); status(resp) != http.StatusNotFound {
		t.Fatalf("GET of a destroyed sandbox: %d, want 404", status(resp))
	}
	lastActivity := func(idOrName string) int {
		resp, _ := c.api.SandboxAPI.UpdateLastActivity(c.ctx, idOrName).Execute()
		return status(resp)
	}
	for _, tc := range []struct {
		what, idOrName string
		want           int
	}{
		{"destroyed, by id", sb.ID, http.StatusCreated},
		{"destroyed, by its new name", rec.Name, http.StatusCreated},
		{"deleted in error, by id", broken.ID, http.StatusCreated},
		{"destroyed, by its old name", "gone", http.StatusNotFound},
		{"another organization's", other.ID, http.StatusNotFound},
	} {
		if got := lastActivity(tc.idOrName); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.what, got, tc.want)
		}
	}
	clock.Add(23 * time.Hour)
	if got := lastActivity(sb.ID); got != http.StatusCreated {
		t.Errorf("23 h after: %d, want 201", got)
	}
	clock.Add(time.Hour)
	if got := lastActivity(sb.ID); got != http.StatusNotFound {
		t.Errorf("24 h after: %d, want 404 (the row is gone)", got)
	}
}

// The create answers that come before anything is stored store nothing;
// a failed start comes after the store and leaves the sandbox behind.
func TestCreateRefusalsBeforeAndAfterTheStore(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s, daytonatest.DefaultKey)
	c.create(t, "taken", nil)
	n := len(s.Sandboxes())

	dup := apiclient.NewCreateSandbox()
	dup.SetName("taken")
	gpu := apiclient.NewCreateSandbox()
	gpu.SetName("gpu")
	gpu.SetGpu(1)
	neg := apiclient.NewCreateSandbox()
	neg.SetName("neg")
	neg.SetAutoStopInterval(-1)
	for _, tc := range []struct {
		what string
		req  *apiclient.CreateSandbox
		code int
		msg  string
	}{
		{"duplicate name", dup, http.StatusConflict, "Sandbox with name taken already exists"},
		{"GPU not ephemeral", gpu, http.StatusBadRequest, "GPU sandboxes must be ephemeral"},
		{"negative auto-stop", neg, http.StatusBadRequest, "autoStopInterval"},
	} {
		_, resp, err := c.api.SandboxAPI.CreateSandbox(c.ctx).CreateSandbox(*tc.req).Execute()
		wantError(t, tc.what, resp, err, tc.code, tc.msg)
		if got := len(s.Sandboxes()); got != n {
			t.Fatalf("%s stored a sandbox: %d, want %d", tc.what, got, n)
		}
	}

	s.Inject(daytonatest.RouteCreate, 1, daytonatest.Scripted{FailStart: true})
	doomed := apiclient.NewCreateSandbox()
	doomed.SetName("doomed")
	_, resp, err := c.api.SandboxAPI.CreateSandbox(c.ctx).CreateSandbox(*doomed).Execute()
	wantError(t, "failed start", resp, err, http.StatusBadRequest, "Sandbox failed to start")
	if got := len(s.Sandboxes()); got != n+1 {
		t.Fatalf("a failed start left %d sandboxes, want %d: it follows the store", got, n+1)
	}
}

// A start of a stopped sandbox is answered once it has started, with the
// sandbox as it is then; an errored one is refused; a started one is
// answered as it is.
func TestStartWaitsForStarted(t *testing.T) {
	s := newServer(t, daytonatest.WithCreateDelay(50*time.Millisecond))
	c := newClient(t, s, daytonatest.DefaultKey)
	sb := c.create(t, "st", nil)
	waitState(t, s, sb.GetId(), "started")
	if got, _, err := c.api.SandboxAPI.StartSandbox(c.ctx, "st").Execute(); err != nil || got.GetState() != apiclient.SANDBOXSTATE_STARTED {
		t.Fatalf("start of a started sandbox: %v %s", got.GetState(), body(err))
	}
	if _, _, err := c.api.SandboxAPI.StopSandbox(c.ctx, "st").Execute(); err != nil {
		t.Fatal(body(err))
	}
	waitState(t, s, sb.GetId(), "stopped")
	got, _, err := c.api.SandboxAPI.StartSandbox(c.ctx, "st").Execute()
	if err != nil || got.GetState() != apiclient.SANDBOXSTATE_STARTED {
		t.Fatalf("start of a stopped sandbox answered %v %s, want started after the wait", got.GetState(), body(err))
	}
	broken := seedIn(t, s, daytonatest.SeedSandbox{Name: "broken", State: "error"})
	_, resp, err := c.api.SandboxAPI.StartSandbox(c.ctx, broken.ID).Execute()
	wantError(t, "start of an errored sandbox", resp, err, http.StatusBadRequest, "Sandbox is in an errored state")
}

// While its runner copies it, the parent is forking and pending: another
// fork is refused, and so is its delete; then both are started.
func TestForkingParent(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	s := newServer(t, daytonatest.WithClock(clock.Now))
	c := newClient(t, s, daytonatest.DefaultKey)
	parent := seedIn(t, s, daytonatest.SeedSandbox{Name: "vm", Class: daytonatest.ClassLinuxVM})
	f, _, err := c.api.SandboxAPI.ForkSandbox(c.ctx, "vm").ForkSandbox(*apiclient.NewForkSandbox()).Execute()
	if err != nil {
		t.Fatal(body(err))
	}
	if rec := mustSandbox(t, s, parent.ID); rec.State != "forking" || !rec.Pending {
		t.Fatalf("parent during the fork: %s pending %v, want forking and pending", rec.State, rec.Pending)
	}
	_, resp, err := c.api.SandboxAPI.ForkSandbox(c.ctx, "vm").ForkSandbox(*apiclient.NewForkSandbox()).Execute()
	wantError(t, "fork of a forking parent", resp, err, http.StatusBadRequest, "Sandbox must be in started state to fork")
	_, resp, err = c.api.SandboxAPI.DeleteSandbox(c.ctx, "vm").Execute()
	wantError(t, "delete of a forking parent", resp, err, http.StatusConflict, "state change in progress")
	clock.Add(time.Second)
	if p, c := mustSandbox(t, s, parent.ID), mustSandbox(t, s, f.GetId()); p.State != "started" || p.Pending || c.State != "started" {
		t.Fatalf("after the copy: parent %s (pending %v), fork %s; want both started", p.State, p.Pending, c.State)
	}
}
