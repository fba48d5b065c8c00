package dockerproxy

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/intake"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/docker"
	"github.com/tether-run/tether/provider/docker/dockertest"
)

// The proxy is judged against the simulated engine (dockertest), which
// reads the journal the moment each create arrives (OnCreate), so
// "journaled before forwarded" is seen from the engine's side, and by the
// engine's own record of what it holds.

type world struct {
	t      *testing.T
	j      *journal.Journal
	sim    *dockertest.Server
	prov   *docker.Provider
	r      *reaper.Reaper
	p      *Proxy
	client *http.Client // the runner's, over the proxy's socket
	logs   *testutil.Buffer

	mu       sync.Mutex
	atCreate [][]intent.Intent // the live intents as each create arrived
}

func newWorld(t *testing.T, flavor dockertest.Flavor) *world {
	t.Helper()
	dir, err := os.MkdirTemp("", "dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	w := &world{t: t, logs: &testutil.Buffer{}}
	if w.j, err = journal.Open(filepath.Join(dir, "journal.db"), journal.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.j.Close() })
	w.sim = dockertest.New(flavor)
	host, err := w.sim.Listen(filepath.Join(dir, "engine.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.sim.Close)
	w.sim.OnCreate(func(string) {
		live, _ := w.j.Live()
		w.mu.Lock()
		w.atCreate = append(w.atCreate, live)
		w.mu.Unlock()
	})
	e, err := docker.FindEngine(func(k string) string {
		if k == docker.EnvHost {
			return host
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(w.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if w.prov, err = docker.New(docker.Config{Engine: e, Logger: log}); err != nil {
		t.Fatal(err)
	}
	w.r = &reaper.Reaper{Journal: w.j, Providers: provider.NewSet(w.prov), Logger: log, RecheckDelay: time.Millisecond, ConfirmDelay: time.Millisecond}
	w.p = &Proxy{
		Intake: &intake.Intake{Journal: w.j, Provider: docker.ProviderName, Accounts: map[string]string{docker.ProviderName: w.prov.Account()},
			Labels: map[string]string{"scope": "s1"}, Logger: log},
		Engine: e,
		Vouch:  w.r.Vouch,
	}
	sock := filepath.Join(dir, "proxy.sock")
	ln, err := w.p.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	execute, interrupt := w.p.Actor(ln)
	done := make(chan error, 1)
	go func() { done <- execute() }()
	t.Cleanup(func() { interrupt(nil); <-done })
	w.client = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	t.Cleanup(w.client.CloseIdleConnections)
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("proxy socket: %v %v, want mode 0600", fi.Mode(), err)
	}
	return w
}

// call sends one request as the runner's client would, and returns the
// status and body.
func (w *world) call(method, path, body string) (int, []byte) {
	w.t.Helper()
	req, _ := http.NewRequest(method, "http://docker"+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := w.client.Do(req)
	if err != nil {
		w.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (w *world) only() intent.Intent {
	w.t.Helper()
	var all []intent.Intent
	page, err := w.j.ListPage(journal.PageQuery{Limit: 100, States: intent.AllStates()})
	if err != nil {
		w.t.Fatal(err)
	}
	all = page.Intents
	if len(all) != 1 {
		w.t.Fatalf("journal holds %d intents, want 1: %+v", len(all), all)
	}
	return all[0]
}

func (w *world) eventually(what string, cond func() bool) { testutil.WaitFor(w.t, what, cond) }

const image = `"Image":"` + dockertest.Image + `"`

func TestCreateJournaledBeforeForwarded(t *testing.T) {
	for _, prefix := range []string{"", "/v1.41", "/v1.24"} {
		w := newWorld(t, dockertest.Docker)
		code, b := w.call(http.MethodPost, prefix+"/containers/create?name=worker-1", `{`+image+`,"Labels":{"app":"agent"},"Tty":true}`)
		if code != http.StatusCreated {
			t.Fatalf("%s create: %d %s", prefix, code, b)
		}
		var ans struct{ Id string }
		json.Unmarshal(b, &ans)
		w.mu.Lock()
		before := w.atCreate[0]
		w.mu.Unlock()
		if len(before) != 1 || before[0].Provider != docker.ProviderName || before[0].Name != "worker-1" || before[0].State != intent.Pending {
			t.Fatalf("%s: when the create reached the engine the journal held %+v", prefix, before)
		}
		cs := w.sim.Containers()
		if len(cs) != 1 || cs[0].ID != ans.Id || cs[0].Name != "worker-1" {
			t.Fatalf("engine holds %+v", cs)
		}
		in := before[0]
		for k, v := range map[string]string{"app": "agent", intent.LabelOwner: w.j.Owner(), intent.LabelIntent: in.ID, docker.LabelName: "worker-1", "scope": "s1"} {
			if cs[0].Labels[k] != v {
				t.Errorf("%s: label %s=%q, want %q (labels %v)", prefix, k, cs[0].Labels[k], v, cs[0].Labels)
			}
		}
		w.eventually("the id journaled", func() bool { got, _ := w.j.Get(in.ID); return got.SandboxID == ans.Id })
	}
}

func TestUnnamedContainerKeepsTheEnginesName(t *testing.T) {
	w := newWorld(t, dockertest.Docker)
	if code, b := w.call(http.MethodPost, "/containers/create", `{`+image+`}`); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, b)
	}
	in := w.only()
	c := w.sim.Containers()[0]
	if in.Name != intent.NamePrefix+in.ID || c.Name == in.Name || c.Labels[docker.LabelName] != in.Name {
		t.Fatalf("intent %s, container %s labelled %v", in.Name, c.Name, c.Labels)
	}
	sb, err := w.prov.GetByName(context.Background(), in.Name)
	if err != nil || sb.ID != c.ID {
		t.Fatalf("found by its label: %+v %v", sb, err)
	}
}

func TestRefusedCreatesCloseAtOnce(t *testing.T) {
	for _, tc := range []struct {
		flavor dockertest.Flavor
		name   string
		body   string
		status int
	}{
		{dockertest.Docker, "no such image", `{"Image":"nosuch/img:1"}`, http.StatusNotFound},
		{dockertest.Docker, "bad body", `{"Image":"` + dockertest.Image + `","HostConfig":{"AutoRemove":true,"RestartPolicy":{"Name":"always"}}}`, http.StatusBadRequest},
		{dockertest.Podman, "podman no such image", `{"Image":"nosuch/img:1"}`, http.StatusNotFound},
		{dockertest.Podman, "podman rm+restart", `{"Image":"` + dockertest.Image + `","HostConfig":{"AutoRemove":true,"RestartPolicy":{"Name":"always"}}}`, http.StatusInternalServerError},
	} {
		w := newWorld(t, tc.flavor)
		code, b := w.call(http.MethodPost, "/containers/create", tc.body)
		if code != tc.status {
			t.Fatalf("%s: %d %s", tc.name, code, b)
		}
		w.eventually(tc.name+": intent closed", func() bool { return w.only().State == intent.NeverCreated })
	}
	for _, flavor := range []dockertest.Flavor{dockertest.Docker, dockertest.Podman} {
		w := newWorld(t, flavor)
		w.sim.Add("taken", nil)
		code, _ := w.call(http.MethodPost, "/containers/create?name=taken", `{`+image+`}`)
		if code != http.StatusConflict && code != http.StatusInternalServerError {
			t.Fatalf("name in use: %d", code)
		}
		w.eventually("name in use: intent closed", func() bool { return w.only().State == intent.NeverCreated })
		if len(w.sim.Containers()) != 1 {
			t.Fatal("the other container is untouched")
		}
	}
}

func TestOtherErrorsStayForTheDrain(t *testing.T) {
	w := newWorld(t, dockertest.Docker)
	w.sim.Push("create", 1, dockertest.Answer{Status: http.StatusInternalServerError, Message: "containerd: deadline exceeded"})
	if code, _ := w.call(http.MethodPost, "/containers/create", `{`+image+`}`); code != http.StatusInternalServerError {
		t.Fatal(code)
	}
	if in := w.only(); in.State != intent.Pending {
		t.Fatalf("a 500 may hide a container: %s", in.State)
	}
}

// A create whose answer is lost after the engine made the container (the
// runner's `docker run` failing after the create): the intent stays
// pending, and the drain finds the container by tether's labels and
// removes it.
func TestLostAnswerFoundByLabels(t *testing.T) {
	w := newWorld(t, dockertest.Docker)
	w.sim.SetFaults(dockertest.Faults{LoseCreateAnswer: true})
	req, _ := http.NewRequest(http.MethodPost, "http://docker/containers/create", strings.NewReader(`{`+image+`}`))
	req.Header.Set("Content-Type", "application/json")
	if resp, err := w.client.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the runner got an answer: %d", resp.StatusCode)
	}
	in := w.only()
	if in.State != intent.Pending || in.SandboxID != "" || len(w.sim.Containers()) != 1 {
		t.Fatalf("intent %+v, engine %d containers", in, len(w.sim.Containers()))
	}
	w.sim.SetFaults(dockertest.Faults{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rep := w.r.Drain(ctx, []intent.Intent{in})
	if rep.Gone != 1 || len(w.sim.Containers()) != 0 {
		t.Fatalf("drain %+v, engine holds %+v", rep, w.sim.Containers())
	}
}

func TestDeleteThroughTheProxyMarksTheIntent(t *testing.T) {
	w := newWorld(t, dockertest.Docker)
	_, b := w.call(http.MethodPost, "/containers/create?name=del-me", `{`+image+`}`)
	var ans struct{ Id string }
	json.Unmarshal(b, &ans)
	in := w.only()
	w.eventually("observed", func() bool { got, _ := w.j.Get(in.ID); return got.SandboxID == ans.Id })
	// By its name, as `docker rm -f del-me` does: resolved to the id.
	if code, b := w.call(http.MethodDelete, "/v1.41/containers/del-me?force=1", ""); code != http.StatusNoContent {
		t.Fatalf("delete: %d %s", code, b)
	}
	if got := w.only(); got.State != intent.Releasing {
		t.Fatalf("after the runner's delete: %s, want releasing", got.State)
	}
	rep := w.r.Drain(context.Background(), []intent.Intent{in})
	if rep.Gone != 1 || w.sim.Calls()["delete"] != 1 {
		t.Fatalf("drain %+v; calls %v (the drain confirms, it does not delete again)", rep, w.sim.Calls())
	}
}

func TestRunnerDeclaredPassesUntouched(t *testing.T) {
	w := newWorld(t, dockertest.Docker)
	in, _, err := w.j.Create(context.Background(), intent.Declaration{Provider: docker.ProviderName, Account: w.prov.Account(), Labels: map[string]string{"scope": "s1"}})
	if err != nil {
		t.Fatal(err)
	}
	labels, _ := json.Marshal(in.Labels)
	if code, b := w.call(http.MethodPost, "/containers/create?name="+in.Name, `{`+image+`,"Labels":`+string(labels)+`}`); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, b)
	}
	page, _ := w.j.ListPage(journal.PageQuery{Limit: 10, States: intent.AllStates()})
	if len(page.Intents) != 1 {
		t.Fatalf("a declared create is not journaled again: %d intents", len(page.Intents))
	}
	if _, ok := w.sim.Containers()[0].Labels[docker.LabelName]; ok {
		t.Fatal("a declared create passes untouched")
	}
}

func TestNetworksAndVolumesDrainAfterTheirContainers(t *testing.T) {
	for _, flavor := range []dockertest.Flavor{dockertest.Docker, dockertest.Podman} {
		w := newWorld(t, flavor)
		if code, b := w.call(http.MethodPost, "/v1.41/networks/create", `{"Name":"net1","CheckDuplicate":true}`); code != http.StatusCreated {
			t.Fatalf("network: %d %s", code, b)
		}
		if code, b := w.call(http.MethodPost, "/volumes/create", `{"Name":"vol1"}`); code != http.StatusCreated {
			t.Fatalf("volume: %d %s", code, b)
		}
		code, b := w.call(http.MethodPost, "/containers/create", `{`+image+`,"HostConfig":{"NetworkMode":"net1","Binds":["vol1:/data"]}}`)
		if code != http.StatusCreated {
			t.Fatalf("container: %d %s", code, b)
		}
		var ans struct{ Id string }
		json.Unmarshal(b, &ans)
		w.call(http.MethodPost, "/containers/"+ans.Id+"/start", "")
		if n := w.sim.Networks(); len(n) != 1 || n[0].Labels[docker.LabelName] != "network:net1" {
			t.Fatalf("networks %+v", n)
		}
		live, _ := w.j.Live()
		names := map[string]bool{}
		for _, in := range live {
			names[in.Name] = true
		}
		if !names["network:net1"] || !names["volume:vol1"] || len(live) != 3 {
			t.Fatalf("live intents %v", names)
		}
		w.eventually("ids journaled", func() bool {
			live, _ := w.j.Live()
			for _, in := range live {
				if in.SandboxID == "" {
					return false
				}
			}
			return true
		})
		live, _ = w.j.Live()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		rep := w.r.Drain(ctx, live)
		cancel()
		if rep.Gone != 3 || len(w.sim.Containers())+len(w.sim.Networks())+len(w.sim.Volumes()) != 0 {
			t.Fatalf("flavor %d: drain %+v; engine: %+v %+v %+v", flavor, rep, w.sim.Containers(), w.sim.Networks(), w.sim.Volumes())
		}
	}
}

func TestAnonymousAndExistingVolumes(t *testing.T) {
	w := newWorld(t, dockertest.Docker)
	code, b := w.call(http.MethodPost, "/volumes/create", `{}`)
	var v struct{ Name string }
	json.Unmarshal(b, &v)
	if code != http.StatusCreated || !strings.HasPrefix(v.Name, "tether-vol-") {
		t.Fatalf("anonymous volume: %d %s", code, b)
	}
	// Another's volume of a name: the engine answers it unchanged, and
	// the drain leaves it.
	w.call(http.MethodPost, "/volumes/create", `{"Name":"theirs","Labels":{"owner":"them"}}`) // through a tether: journaled as ours
	live, _ := w.j.Live()
	if len(live) != 2 {
		t.Fatalf("%d live", len(live))
	}
	// A second create of "theirs" by a runner under tether: the answer is
	// the existing volume, without tether's labels of the second intent.
	w.call(http.MethodPost, "/volumes/create", `{"Name":"theirs"}`)
	live, _ = w.j.Live()
	var second intent.Intent
	for _, in := range live {
		if in.Name == "volume:theirs" && (second.ID == "" || in.CreatedAt.After(second.CreatedAt)) {
			second = in
		}
	}
	w.eventually("observed", func() bool { got, _ := w.j.Get(second.ID); return got.SandboxID != "" })
	rep := w.r.Drain(context.Background(), []intent.Intent{second})
	if len(rep.Foreign) != 1 {
		t.Fatalf("the second create's intent: %+v, want foreign", rep)
	}
	found := false
	for _, vol := range w.sim.Volumes() {
		found = found || vol.Name == "theirs"
	}
	if !found {
		t.Fatal("the volume of the first intent was deleted by the second's drain")
	}
}

func TestEverythingElsePassesUntouched(t *testing.T) {
	w := newWorld(t, dockertest.Docker)
	w.sim.Add("x", map[string]string{"k": "v"})
	code, b := w.call(http.MethodGet, "/v1.41/containers/json?all=1", "")
	if code != http.StatusOK || !strings.Contains(string(b), `"k":"v"`) {
		t.Fatalf("list: %d %s", code, b)
	}
	code, b = w.call(http.MethodGet, "/_ping", "")
	if code != http.StatusOK || string(b) != "OK" {
		t.Fatalf("ping: %d %q", code, b)
	}
	page, _ := w.j.ListPage(journal.PageQuery{Limit: 10, States: intent.AllStates()})
	if len(page.Intents) != 0 {
		t.Fatal("nothing journaled")
	}
}

func TestEngineDownNothingCreated(t *testing.T) {
	w := newWorld(t, dockertest.Docker)
	w.sim.Close()
	req, _ := http.NewRequest(http.MethodPost, "http://docker/containers/create", strings.NewReader(`{`+image+`}`))
	if resp, err := w.client.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("an engine that is gone: %d", resp.StatusCode)
	}
	w.eventually("the intent closes: nothing reached the engine", func() bool { return w.only().State == intent.NeverCreated })
}

func TestRoute(t *testing.T) {
	for in, want := range map[string]string{
		"/v1.41/containers/create": "/containers/create", "/containers/create": "/containers/create",
		"/v1.41": "/", "/volumes/create": "/volumes/create", "/v4.3.1-dev/x": "/x",
	} {
		if got := Route(in); got != want {
			t.Errorf("Route(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseBody(t *testing.T) {
	for _, bad := range []string{`[]`, `"x"`, `{"Labels":["a"]}`, `{"Labels":{"a":1}}`, `{"Name":3}`, `{`} {
		if _, err := parseBody([]byte(bad)); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
	c, err := parseBody([]byte(`{"Labels":null,"Name":"n","X":{"y":1}}`))
	if err != nil || c.name != "n" || c.labels != nil || string(c.fields["X"]) != `{"y":1}` {
		t.Fatalf("%+v %v", c, err)
	}
	if _, err := parseBody(nil); err != nil {
		t.Fatal(err)
	}
}

func FuzzParseBody(f *testing.F) {
	for _, s := range []string{`{}`, `{"Labels":{"a":"b"}}`, `{"Name":"x","Labels":null}`, `null`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := parseBody(b)
		if err != nil {
			return
		}
		p := &Proxy{Intake: &intake.Intake{Logger: slog.New(slog.DiscardHandler)}}
		out, _, err := p.labelled(c, intent.Intent{Name: "n", Labels: map[string]string{intent.LabelOwner: "o"}})
		if err != nil {
			return
		}
		var back map[string]json.RawMessage
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("rewritten body is not JSON: %v", err)
		}
	})
}

// TestSlowRemovalIsNotCutAndSentAgain: a force-remove that takes longer
// than the reaper's per-call bound (dozens at once take seconds) runs to
// its end under the provider's own bound (provider.CallTimer): one DELETE,
// not one per timeout.
func TestSlowRemovalIsNotCutAndSentAgain(t *testing.T) {
	w := newWorld(t, dockertest.Docker)
	w.r.CallTimeout = 50 * time.Millisecond
	code, b := w.call(http.MethodPost, "/containers/create", `{`+image+`}`)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, b)
	}
	in := w.only()
	w.eventually("observed", func() bool { got, _ := w.j.Get(in.ID); return got.SandboxID != "" })
	w.sim.SetFaults(dockertest.Faults{DeleteDelay: 300 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rep := w.r.Drain(ctx, []intent.Intent{in})
	c := w.sim.History()[0]
	if rep.Gone != 1 || !c.Removed || c.Deletes != 1 {
		t.Fatalf("drain %+v; the container: removed %v after %d DELETEs, want 1", rep, c.Removed, c.Deletes)
	}
}
