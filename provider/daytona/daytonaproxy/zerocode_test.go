package daytonaproxy

import (
	"bufio"
	"bytes"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	apiclient "github.com/daytonaio/daytona/libs/api-client-go"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/provider/daytona"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// The calls a runner makes after its create, through the official
// api-client-go, judged by the simulator's record.

// create makes one sandbox through the proxy (auto-stop as given, -1:
// absent) and returns its id once its intent holds it.
func (w *world) create(name string, autoStop int) string {
	w.t.Helper()
	req := apiclient.NewCreateSandbox()
	if name != "" {
		req.SetName(name)
	}
	if autoStop >= 0 {
		req.SetAutoStopInterval(int32(autoStop))
	}
	req.SetLabels(map[string]string{"team": "a"})
	req.SetSnapshot(vmSnapshot)
	sb, _, err := w.runner().SandboxAPI.CreateSandbox(ctx(w.t)).CreateSandbox(*req).Execute()
	if err != nil {
		w.t.Fatalf("create through the proxy: %v", err)
	}
	w.intentOf(sb.GetId())
	return sb.GetId()
}

// intentOf waits for the intent that observed sandbox id and returns it.
func (w *world) intentOf(id string) intent.Intent {
	w.t.Helper()
	var found intent.Intent
	testutil.Eventually(w.t, "sandbox "+id+" is journaled", func() (bool, string) {
		all, err := w.j.All()
		if err != nil {
			return false, err.Error()
		}
		for _, in := range all {
			if in.SandboxID == id {
				found = in
				return true, ""
			}
		}
		return false, "no intent holds it"
	})
	return found
}

// ours reports whether the simulator's sandbox carries every label of in.
func ours(sb daytonatest.Sandbox, in intent.Intent) bool {
	for k, v := range in.Labels {
		if sb.Labels[k] != v {
			return false
		}
	}
	return true
}

// Labels are a full replacement: for a sandbox of tether's, tether's
// labels go back in, the runner's own are all kept, the runner sees
// Daytona's answer, and the drain still finds the sandbox ours. A sandbox
// that is not tether's is replaced as the runner asked.
func TestLabelReplacementKeepsTethersLabels(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	id := w.create("", -1)
	in := w.intentOf(id)
	c := w.runner()
	got, _, err := c.SandboxAPI.ReplaceLabels(ctx(t), id).SandboxLabels(*apiclient.NewSandboxLabels(map[string]string{"team": "b", "new": "1"})).Execute()
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := w.sim.Sandbox(id)
	if !ours(rec, in) || rec.Labels["team"] != "b" || rec.Labels["new"] != "1" || len(rec.Labels) != len(in.Labels)+2 {
		t.Fatalf("labels after the runner's replacement: %v, want the runner's and %v", rec.Labels, in.Labels)
	}
	if !maps.Equal(got.GetLabels(), rec.Labels) {
		t.Errorf("the runner's answer %v is not Daytona's %v", got.GetLabels(), rec.Labels)
	}
	// A replacement that tries to remove or spoof tether's labels.
	spoof := map[string]string{intent.LabelOwner: "someone-else", intent.LabelIntent: "x", "scope": "other"}
	if _, _, err := c.SandboxAPI.ReplaceLabels(ctx(t), rec.Name).SandboxLabels(*apiclient.NewSandboxLabels(spoof)).Execute(); err != nil {
		t.Fatal(err)
	}
	if rec, _ = w.sim.Sandbox(id); !ours(rec, in) {
		t.Fatalf("tether's labels were replaced by name: %v", rec.Labels)
	}
	if !strings.Contains(w.logs.String(), "tether's are kept") {
		t.Errorf("the spoof was not reported:\n%s", w.logs)
	}
	// Not tether's: untouched.
	other, err := w.sim.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Name: "not-tethers", Labels: map[string]string{"a": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.SandboxAPI.ReplaceLabels(ctx(t), other.ID).SandboxLabels(*apiclient.NewSandboxLabels(map[string]string{"b": "2"})).Execute(); err != nil {
		t.Fatal(err)
	}
	if rec, _ := w.sim.Sandbox(other.ID); !maps.Equal(rec.Labels, map[string]string{"b": "2"}) {
		t.Errorf("a sandbox not tether's got labels %v", rec.Labels)
	}
	// A reaper that never saw the create (tether restarted) reads it and
	// still proves it ours.
	live, _ := w.j.Live()
	fresh := w.newReaper(daytona.Config{APIKey: secretKey, APIURL: w.upstream})
	rep := fresh.Drain(ctx(t), live)
	if rep.Gone != 1 || rep.Live() != 0 || len(rep.Foreign) != 0 {
		t.Fatalf("drain: %+v", rep)
	}
	if rec, _ := w.sim.Sandbox(other.ID); rec.DeleteRequested {
		t.Error("the drain deleted a sandbox not tether's")
	}
}

// A fork is journaled like a create (name, its own labels, its parent
// remembered), and the drain deletes it before its parent, which Daytona
// refuses to delete while it lives.
func TestForkIsJournaledAndDrainedBeforeItsParent(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	parentID := w.create("", 0)
	parent := w.intentOf(parentID)
	fork, _, err := w.runner().SandboxAPI.ForkSandbox(ctx(t), parentID).ForkSandbox(*apiclient.NewForkSandbox()).Execute()
	if err != nil {
		t.Fatalf("fork through the proxy: %v", err)
	}
	named, _, err := w.runner().SandboxAPI.ForkSandbox(ctx(t), parent.Name).ForkSandbox(apiclient.ForkSandbox{Name: apiclient.PtrString("my-fork")}).Execute()
	if err != nil {
		t.Fatalf("named fork: %v", err)
	}
	for _, f := range []*apiclient.Sandbox{fork, named} {
		in := w.intentOf(f.GetId())
		if in.ParentIntent != parent.ID {
			t.Errorf("fork intent %+v: want parent %s", in, parent.ID)
		}
		rec, _ := w.sim.Sandbox(f.GetId())
		if rec.ForkOf != parentID || rec.Name != in.Name || !ours(rec, in) {
			t.Errorf("fork %+v: want a fork of %s named %s with labels %v", rec, parentID, in.Name, in.Labels)
		}
		if rec.AutoStopInterval != backstop {
			t.Errorf("fork auto-stop %d, want the backstop", rec.AutoStopInterval)
		}
	}
	if in := w.intentOf(fork.GetId()); in.Name != intent.NamePrefix+in.ID {
		t.Errorf("unnamed fork named %q, want tether-<id>", in.Name)
	}
	if in := w.intentOf(named.GetId()); in.Name != "my-fork" {
		t.Errorf("named fork journaled as %q", in.Name)
	}
	// Settled first (the parent forking, the forks creating answer 409
	// to a delete), so that the count below is the drain's order alone.
	testutil.Eventually(t, "the parent and its forks settle", func() (bool, string) {
		for _, id := range []string{parentID, fork.GetId(), named.GetId()} {
			if rec, _ := w.sim.Sandbox(id); rec.State != "started" || rec.Pending {
				return false, id + " is " + rec.State
			}
		}
		return true, ""
	})
	rep := w.drain()
	if rep.Gone != 3 || rep.Live() != 0 {
		t.Fatalf("drain: %+v", rep)
	}
	for _, id := range []string{parentID, fork.GetId(), named.GetId()} {
		if rec, _ := w.sim.Sandbox(id); !rec.DeleteRequested {
			t.Errorf("sandbox %s left: %+v", id, rec)
		}
	}
	if n := len(w.sim.Sandboxes()); n != 3 {
		t.Errorf("%d sandboxes in the simulator, want 3", n)
	}
	// The parent's delete waited for its forks': none was refused.
	if n := w.sim.Calls()[daytonatest.RouteDelete]; n != 3 {
		t.Errorf("%d deletes reached Daytona, want 3: one per sandbox", n)
	}
}

// A fork carrying its parent's labels (tether died before it relabeled
// it) is still proved ours by its name, and deleted.
func TestForkWithItsParentsLabelsIsOurs(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	parentID := w.create("", -1)
	parent := w.intentOf(parentID)
	// The relabel fails: the fork keeps its parent's labels.
	w.sim.FailNext(daytonatest.RouteLabels, http.StatusInternalServerError, 1)
	fork, _, err := w.runner().SandboxAPI.ForkSandbox(ctx(t), parentID).ForkSandbox(*apiclient.NewForkSandbox()).Execute()
	if err != nil {
		t.Fatal(err)
	}
	in := w.intentOf(fork.GetId())
	if rec, _ := w.sim.Sandbox(fork.GetId()); rec.Labels[intent.LabelIntent] != parent.ID {
		t.Fatalf("the fork's labels %v: want its parent's", rec.Labels)
	}
	live, _ := w.j.Live()
	rep := w.newReaper(daytona.Config{APIKey: secretKey, APIURL: w.upstream}).Drain(ctx(t), live)
	if rep.Gone != 2 || rep.Live() != 0 {
		t.Fatalf("drain: %+v (fork intent %+v)", rep, in)
	}
}

// Interval setters of a sandbox of tether's follow the create's rule: an
// auto-stop of 0 becomes the backstop, anything else passes; a sandbox that
// is not tether's is set as the runner asked.
func TestSettersFollowTheCreatesRule(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	id := w.create("", 5)
	c := w.runner()
	set := func(id string, f func() (*apiclient.Sandbox, *http.Response, error)) {
		t.Helper()
		if _, _, err := f(); err != nil {
			t.Fatalf("setter on %s: %v", id, err)
		}
	}
	set(id, func() (*apiclient.Sandbox, *http.Response, error) {
		return c.SandboxAPI.SetAutostopInterval(ctx(t), id, 0).Execute()
	})
	if rec, _ := w.sim.Sandbox(id); rec.AutoStopInterval != backstop {
		t.Fatalf("auto-stop after the runner set 0: %d, want the backstop %d", rec.AutoStopInterval, backstop)
	}
	if !strings.Contains(w.logs.String(), "runner_sent") || !strings.Contains(w.logs.String(), "autostop") {
		t.Errorf("the replacement was not logged with what the runner sent:\n%s", w.logs)
	}
	set(id, func() (*apiclient.Sandbox, *http.Response, error) {
		return c.SandboxAPI.SetAutostopInterval(ctx(t), id, 30).Execute()
	})
	set(id, func() (*apiclient.Sandbox, *http.Response, error) {
		return c.SandboxAPI.SetAutoDeleteInterval(ctx(t), id, -1).Execute()
	})
	set(id, func() (*apiclient.Sandbox, *http.Response, error) {
		return c.SandboxAPI.SetAutoArchiveInterval(ctx(t), id, 90).Execute()
	})
	if rec, _ := w.sim.Sandbox(id); rec.AutoStopInterval != 30 || rec.AutoDeleteInterval != -1 || rec.AutoArchiveInterval != 90 {
		t.Fatalf("intervals %d/%d/%d, want the runner's 30/-1/90", rec.AutoStopInterval, rec.AutoDeleteInterval, rec.AutoArchiveInterval)
	}
	other, err := w.sim.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Name: "not-tethers"})
	if err != nil {
		t.Fatal(err)
	}
	set(other.ID, func() (*apiclient.Sandbox, *http.Response, error) {
		return c.SandboxAPI.SetAutostopInterval(ctx(t), other.ID, 0).Execute()
	})
	if rec, _ := w.sim.Sandbox(other.ID); rec.AutoStopInterval != 0 {
		t.Errorf("a sandbox not tether's got auto-stop %d", rec.AutoStopInterval)
	}
}

// In lease mode a setter cannot take the lease off: auto-stop stays the
// lease, auto-delete at most the lease.
func TestSettersKeepTheLease(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	w.p.LeaseMinutes = 2
	id := w.create("", -1)
	c := w.runner()
	if _, _, err := c.SandboxAPI.SetAutostopInterval(ctx(t), id, 0).Execute(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.SandboxAPI.SetAutoDeleteInterval(ctx(t), id, -1).Execute(); err != nil {
		t.Fatal(err)
	}
	if rec, _ := w.sim.Sandbox(id); rec.AutoStopInterval != 2 || rec.AutoDeleteInterval != 2 {
		t.Fatalf("intervals %d/%d, want the lease's 2/2", rec.AutoStopInterval, rec.AutoDeleteInterval)
	}
	if !strings.Contains(w.logs.String(), "lease mode replaces the runner's intervals") {
		t.Errorf("not logged:\n%s", w.logs)
	}
}

// A create refused 409 (the name is taken; nothing stored) closes its
// intent at once, with the reason, and a DELETE by that name moves the
// intent that owns the sandbox, not the refused one.
func TestDuplicateNameIsNeverCreatedAtOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	id := w.create("dup", -1)
	first := w.intentOf(id)
	req := apiclient.NewCreateSandbox()
	req.SetName("dup")
	_, resp, err := w.runner().SandboxAPI.CreateSandbox(ctx(t)).CreateSandbox(*req).Execute()
	if err == nil || resp == nil || resp.StatusCode != http.StatusConflict {
		t.Fatalf("want Daytona's 409, got %v (%v)", resp, err)
	}
	all, _ := w.j.All()
	if len(all) != 2 {
		t.Fatalf("%d intents", len(all))
	}
	for _, in := range all {
		if in.ID != first.ID && (in.State != intent.NeverCreated || !strings.Contains(in.LastError, "409")) {
			t.Fatalf("refused intent %+v: want never-created, saying why", in)
		}
	}
	if _, _, err := w.runner().SandboxAPI.DeleteSandbox(ctx(t), "dup").Execute(); err != nil {
		t.Fatal(err)
	}
	if in, _ := w.j.Get(first.ID); in.State != intent.Releasing {
		t.Fatalf("the owner's intent is %s, want releasing", in.State)
	}
	rep := w.drain()
	if rep.Gone != 1 || rep.Live() != 0 {
		t.Fatalf("drain: %+v", rep)
	}
}

// Only a create that names a live intent of this journal passes untouched:
// one that copies the labels of an earlier sandbox, or makes up an owner,
// is journaled, labelled as its own intent, and backstopped.
func TestSpoofedOwnerLabelsAreJournaled(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	first := w.intentOf(w.create("", -1))
	for i, labels := range []map[string]string{
		first.Labels, // copied from an earlier sandbox (its intent is live)
		{intent.LabelOwner: w.j.Owner(), intent.LabelIntent: "01jzzzzzzzzzzzzzzzzzzzzzzz"},
		{intent.LabelOwner: "another-tether"},
	} {
		req := apiclient.NewCreateSandbox()
		req.SetLabels(labels)
		req.SetAutoStopInterval(0)
		sb, _, err := w.runner().SandboxAPI.CreateSandbox(ctx(t)).CreateSandbox(*req).Execute()
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		in := w.intentOf(sb.GetId())
		rec, _ := w.sim.Sandbox(sb.GetId())
		if !ours(rec, in) || rec.AutoStopInterval != backstop {
			t.Errorf("%d: sandbox %+v: want labelled as intent %s and backstopped", i, rec, in.ID)
		}
	}
	rep := w.drain()
	if rep.Gone != 4 || rep.Live() != 0 {
		t.Fatalf("drain: %+v", rep)
	}
}

// Paths are matched as Daytona's router matches them: any case, trailing
// and repeated slashes; none of these creates passes unjournaled.
func TestRoutesMatchedAsTheServerDoes(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	base := strings.TrimSuffix(w.url, "/api")
	for i, path := range []string{"/api/sandbox/", "/API/Sandbox", "//api//sandbox", "/api/./sandbox", "/api/x/../sandbox"} {
		req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(`{"autoStopInterval":0}`))
		req.Header.Set("Authorization", "Bearer "+secretKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
		if all, _ := w.j.All(); len(all) != i+1 {
			t.Fatalf("%s: %d intents, want %d: the create passed unjournaled", path, len(all), i+1)
		}
	}
	for _, sb := range w.sim.Sandboxes() {
		if sb.Labels[intent.LabelOwner] != w.j.Owner() || sb.AutoStopInterval != backstop {
			t.Errorf("sandbox %+v: not labelled or backstopped", sb)
		}
	}
	// A label replacement in another spelling is ruled too.
	id := w.sim.Sandboxes()[0].ID
	req, _ := http.NewRequest(http.MethodPut, base+"/API//SANDBOX/"+id+"/Labels/", strings.NewReader(`{"labels":{}}`))
	req.Header.Set("Authorization", "Bearer "+secretKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if rec, _ := w.sim.Sandbox(id); resp.StatusCode != http.StatusOK || rec.Labels[intent.LabelOwner] != w.j.Owner() {
		t.Errorf("label replacement %d: labels %v", resp.StatusCode, rec.Labels)
	}
	if rep := w.drain(); rep.Gone != 5 || rep.Live() != 0 {
		t.Fatalf("drain: %+v", rep)
	}
}

// A proxied sandbox costs the drain one read and one delete: Daytona's own
// create answer proved it ours, as the backstop's read does for a sandbox
// declared over the socket. Labels the runner changed since do not matter.
func TestProxiedSandboxDrainCostsOneReadOneDelete(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	ids := []string{w.create("", -1), w.create("named-one", 0)}
	if _, _, err := w.runner().SandboxAPI.ReplaceLabels(ctx(t), ids[1]).SandboxLabels(*apiclient.NewSandboxLabels(map[string]string{"x": "y"})).Execute(); err != nil {
		t.Fatal(err)
	}
	before := map[string]map[string]int{}
	for _, id := range ids {
		before[id] = w.sim.CallsFor(id)
	}
	rep := w.drain()
	if rep.Gone != 2 || rep.Live() != 0 {
		t.Fatalf("drain: %+v", rep)
	}
	for _, id := range ids {
		after := w.sim.CallsFor(id)
		reads, deletes := after[daytonatest.RouteGet]-before[id][daytonatest.RouteGet], after[daytonatest.RouteDelete]-before[id][daytonatest.RouteDelete]
		if reads != 1 || deletes != 1 {
			t.Errorf("sandbox %s cost the drain %d reads and %d deletes, want 1 and 1 (%v)", id, reads, deletes, after)
		}
	}
}

// A runner authenticating with a JWT in tether's own organization (tether
// acting there too): its sandboxes are journaled under tether's account and
// drained.
func TestJWTInTethersOrganizationIsDrained(t *testing.T) {
	t.Parallel()
	const jwt = "eyJ.runner-jwt.sig"
	w := newWorld(t, nil)
	w.sim.AddJWT(jwt, daytonatest.DefaultOrg)
	w.p.Accounts[w.p.ProviderName()] = daytona.Fingerprint(w.upstream, "organization:"+daytonatest.DefaultOrg)
	c := client(w.url, jwt)
	sb, _, err := c.SandboxAPI.CreateSandbox(ctx(t)).XDaytonaOrganizationID(daytonatest.DefaultOrg).CreateSandbox(*apiclient.NewCreateSandbox()).Execute()
	if err != nil {
		t.Fatal(err)
	}
	in := w.intentOf(sb.GetId())
	if in.Account != w.p.Account() {
		t.Fatalf("intent account %q, want tether's %q", in.Account, w.p.Account())
	}
	live, _ := w.j.Live()
	r := w.newReaper(daytona.Config{JWTToken: jwt, OrganizationID: daytonatest.DefaultOrg, APIURL: w.upstream})
	if rep := r.Drain(ctx(t), live); rep.Gone != 1 || rep.Live() != 0 {
		t.Fatalf("drain: %+v", rep)
	}
	if rec, _ := w.sim.Sandbox(sb.GetId()); !rec.DeleteRequested {
		t.Errorf("sandbox left: %+v", rec)
	}
	if strings.Contains(w.logs.String(), jwt) {
		t.Error("the runner's JWT reached the logs")
	}
}

// A create Daytona executed before the connection broke (not a dial error):
// the request was sent whole and stored, and its answer is lost, to an
// orderly close (the proxy reads EOF) or a reset (a read error: an RST, as
// a load balancer or a network in between sends). Only a failed dial proves
// nothing was sent: the runner meets a connection error, the intent stays
// pending, the create is not sent again, and the drain finds the sandbox by
// its name and deletes it, by the simulator's record.
func TestCreateExecutedBeforeTheConnectionReset(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		rst  bool
	}{{"closed", false}, {"reset", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			reset := func(sim http.Handler) http.Handler {
				return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
					if r.Method != http.MethodPost || r.URL.Path != "/api/sandbox" {
						sim.ServeHTTP(rw, r)
						return
					}
					sim.ServeHTTP(httptest.NewRecorder(), r) // executed, answer lost
					conn, _, err := http.NewResponseController(rw).Hijack()
					if err != nil {
						return
					}
					if tc.rst {
						conn.(*net.TCPConn).SetLinger(0) // the close sends an RST
					}
					conn.Close()
				})
			}
			w := newWorld(t, reset)
			_, resp, err := w.runner().SandboxAPI.CreateSandbox(ctx(t)).CreateSandbox(*apiclient.NewCreateSandbox()).Execute()
			if err == nil || resp != nil || !isConnError(err) {
				t.Fatalf("want a connection error, got %v (%v)", resp, err)
			}
			if n := w.sim.Calls()[daytonatest.RouteCreate]; n != 1 {
				t.Fatalf("%d creates reached Daytona, want 1 (a create that may have landed is not sent again)", n)
			}
			in := w.only()
			if in.State != intent.Pending || in.SandboxID != "" {
				t.Fatalf("intent %s is %s (%q) with sandbox %q: want pending without id, for the drain", in.ID, in.State, in.LastError, in.SandboxID)
			}
			if !strings.Contains(w.logs.String(), "got no answer; the drain resolves it by name") && !strings.Contains(w.logs.String(), "answer cut short; the drain resolves it by name") {
				t.Errorf("the proxy did not say the create's answer was lost:\n%s", w.logs)
			}
			sb, ok := w.byName(in.Name)
			if !ok || !ours(sb, in) {
				t.Fatalf("the simulator holds no sandbox of the intent's name and labels: %+v", sb)
			}
			if rep := w.drain(); rep.Gone != 1 || rep.Live() != 0 {
				t.Fatalf("drain: %+v", rep)
			}
			if rec, _ := w.sim.Sandbox(sb.ID); rec.State != "destroyed" || !rec.DeleteRequested {
				t.Errorf("sandbox after the drain: %s (delete requested %v), want destroyed", rec.State, rec.DeleteRequested)
			}
			if got, _ := w.j.Get(in.ID); got.State != intent.Gone || got.SandboxID != sb.ID {
				t.Errorf("intent after the drain: %s on %q, want gone on %s", got.State, got.SandboxID, sb.ID)
			}
		})
	}
}

// "autoStopInterval": null is "off" (ARCHITECTURE.md: 0 or null becomes
// --daytona-autostop), judged by what the simulator stored; an absent one
// is the server's default.
func TestNullAutoStopIsTheBackstop(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	for _, tc := range []struct {
		body string
		want int
	}{
		{`{"autoStopInterval":null}`, backstop},
		{`{"autoStopInterval":0}`, backstop},
		{`{}`, 15},
	} {
		req, _ := http.NewRequest(http.MethodPost, w.url+"/sandbox", strings.NewReader(tc.body))
		req.Header.Set("Authorization", "Bearer "+secretKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		b.ReadFrom(bufio.NewReader(resp.Body))
		resp.Body.Close()
		sb, err := decodeSandbox(b.Bytes())
		if err != nil {
			t.Fatalf("%s: %d %s", tc.body, resp.StatusCode, b.String())
		}
		if rec, _ := w.sim.Sandbox(sb.ID); rec.AutoStopInterval != tc.want {
			t.Errorf("%s: the simulator stored auto-stop %d, want %d", tc.body, rec.AutoStopInterval, tc.want)
		}
	}
}

// An upstream configured without Daytona's "/api" prefix: a create that
// carries the prefix itself is still a create, journaled.
func TestCreateUnderTheAPIPrefixOfAnUpstreamWithout(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	root := strings.TrimSuffix(w.upstream, "/api")
	p := &Proxy{Intake: w.p.Intake, Upstream: root, AutoStopMinutes: backstop}
	l, err := p.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(l)
	t.Cleanup(func() { p.Close() })
	req, _ := http.NewRequest(http.MethodPost, p.URL(l)+"/Api/sandbox/", strings.NewReader(`{"autoStopInterval":0}`))
	req.Header.Set("Authorization", "Bearer "+secretKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	in := w.only()
	sb, ok := w.byName(in.Name)
	if !ok || !ours(sb, in) || sb.AutoStopInterval != backstop {
		t.Fatalf("sandbox %+v for intent %+v: want it named, labelled and backstopped", sb, in)
	}
}

// A pending intent whose sandbox was never seen does not make a sandbox of
// its name tether's: its label replacement and setters pass as sent, so
// tether's labels are never put on somebody else's sandbox.
func TestPendingNameAloneIsNotOurs(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	if _, _, err := w.j.Create(ctx(t), intent.Declaration{Name: "shared-name", Labels: w.p.Labels, Provider: "daytona", Account: w.p.Account()}); err != nil {
		t.Fatal(err)
	}
	other, err := w.sim.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Name: "shared-name"})
	if err != nil {
		t.Fatal(err)
	}
	c := w.runner()
	if _, _, err := c.SandboxAPI.ReplaceLabels(ctx(t), "shared-name").SandboxLabels(*apiclient.NewSandboxLabels(map[string]string{"a": "1"})).Execute(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.SandboxAPI.SetAutostopInterval(ctx(t), "shared-name", 0).Execute(); err != nil {
		t.Fatal(err)
	}
	if rec, _ := w.sim.Sandbox(other.ID); !maps.Equal(rec.Labels, map[string]string{"a": "1"}) || rec.AutoStopInterval != 0 {
		t.Errorf("a sandbox never proved tether's got labels %v, auto-stop %d", rec.Labels, rec.AutoStopInterval)
	}
}

// A create that carries tether's owner label passes untouched only when it
// names a live intent with that intent's name and every one of its labels.
// One that names a released intent, or a live one but without one of its
// labels, is journaled as a new intent of its own, labelled as it and
// backstopped: passed untouched, it would be a sandbox no live intent
// answers for.
func TestDeclaredCreateMustNameALiveIntentWithEveryLabel(t *testing.T) {
	w := newWorld(t, nil)
	released, _, err := w.j.Create(ctx(t), intent.Declaration{Labels: map[string]string{"run": "1"}, Provider: "daytona"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.j.Release(released.ID, intent.OutcomeDeleted); err != nil {
		t.Fatal(err)
	}
	live, _, err := w.j.Create(ctx(t), intent.Declaration{Labels: map[string]string{"run": "2"}, Provider: "daytona"})
	if err != nil {
		t.Fatal(err)
	}
	partial := maps.Clone(live.Labels)
	delete(partial, "run")
	for i, c := range []struct {
		name   string
		labels map[string]string
	}{
		{released.Name, released.Labels},
		{live.Name, partial},
	} {
		req := apiclient.NewCreateSandbox()
		req.SetName(c.name)
		req.SetLabels(c.labels)
		req.SetAutoStopInterval(0)
		sb, _, err := w.runner().SandboxAPI.CreateSandbox(ctx(t)).CreateSandbox(*req).Execute()
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		// Journaled before it was forwarded: one more intent at once.
		if all, _ := w.j.All(); len(all) != 3+i {
			t.Fatalf("%d: %d intents after the create, want %d: it passed unjournaled", i, len(all), 3+i)
		}
		in := w.intentOf(sb.GetId())
		rec, _ := w.sim.Sandbox(sb.GetId())
		if in.ID == released.ID || in.ID == live.ID || !in.Live() || rec.Labels[intent.LabelIntent] != in.ID || !ours(rec, in) || rec.AutoStopInterval != backstop {
			t.Errorf("%d: sandbox %+v, intent %+v: want journaled as an intent of its own, labelled as it and backstopped", i, rec, in)
		}
	}
	if rep := w.drain(); rep.Gone != 2 {
		t.Fatalf("drain: %+v", rep)
	}
	for _, sb := range w.sim.Sandboxes() {
		if !sb.DeleteRequested {
			t.Errorf("sandbox %s (%s) not deleted: %+v", sb.ID, sb.Name, sb)
		}
	}
}
