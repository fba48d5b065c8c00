package docker_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/docker"
	"github.com/tether-run/tether/provider/docker/dockertest"
)

// engine serves a simulated engine of flavor on a socket of the test's and
// returns it with a Provider of it.
func engine(t *testing.T, flavor dockertest.Flavor) (*dockertest.Server, *docker.Provider) {
	t.Helper()
	sim := dockertest.New(flavor)
	host, err := sim.Listen(filepath.Join(shortDir(t), "engine.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	e, err := docker.FindEngine(envOf(map[string]string{docker.EnvHost: host}))
	if err != nil {
		t.Fatal(err)
	}
	p, err := docker.New(docker.Config{Engine: e, CallTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return sim, p
}

// shortDir is a temporary directory with a path short enough for a Unix
// socket.
func shortDir(t *testing.T) string {
	d, err := os.MkdirTemp("", "dk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

const owner = "tether-owner"

func TestGetMapsStateNameAndLabels(t *testing.T) {
	sim, p := engine(t, dockertest.Docker)
	id := sim.Add("c1", map[string]string{owner: "o1", docker.LabelName: "tether-x"})
	ctx := context.Background()
	sb, err := p.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID != id || sb.Name != "tether-x" || sb.State != provider.StateStarted || sb.Labels[owner] != "o1" || sb.CreatedAt.IsZero() {
		t.Fatalf("get: %+v", sb)
	}
	sim.Exit(id)
	if sb, _ := p.Get(ctx, id); sb.State != provider.StateStopped {
		t.Fatalf("exited container: state %q, want stopped", sb.State)
	}
	sim.SetStatus(id, "removing")
	if sb, _ := p.Get(ctx, id); sb.State != provider.StateDestroying {
		t.Fatalf("removing container: state %q, want destroying", sb.State)
	}
	plain := sim.Add("plain", nil)
	if sb, _ := p.Get(ctx, plain); sb.Name != "plain" {
		t.Fatalf("a container without tether's name label is named by its own: %q", sb.Name)
	}
}

func TestGetByName(t *testing.T) {
	sim, p := engine(t, dockertest.Docker)
	ctx := context.Background()
	labelled := sim.Add("quirky_name", map[string]string{docker.LabelName: "tether-abc"})
	own := sim.Add("tether-def", map[string]string{owner: "o"})
	other := sim.Add("mine", map[string]string{docker.LabelName: "someone-else"})
	for name, want := range map[string]string{"tether-abc": labelled, "tether-def": own} {
		sb, err := p.GetByName(ctx, name)
		if err != nil || sb.ID != want {
			t.Errorf("by name %s: %+v, %v; want %s", name, sb, err, want)
		}
	}
	// An id prefix is not a name; a container named by its label is not
	// found by its own name when the label says another.
	for _, name := range []string{labelled[:12], "mine", "absent"} {
		if sb, err := p.GetByName(ctx, name); !errors.Is(err, provider.ErrNotFound) {
			t.Errorf("by name %s: %+v, %v; want not found", name, sb, err)
		}
	}
	_ = other
}

func TestDeleteIsForcedAndSynchronous(t *testing.T) {
	sim, p := engine(t, dockertest.Docker)
	ctx := context.Background()
	id := sim.Add("running", map[string]string{owner: "o"})
	if !provider.DeletesSynchronously(p) {
		t.Fatal("a docker delete is synchronous")
	}
	if err := p.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Get(ctx, id); !errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("after the delete: %v, want not found", err)
	}
	if err := p.Delete(ctx, id); !errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("delete again: %v, want not found", err)
	}
	// A name or a prefix is never sent: the engine resolves either.
	for _, ref := range []string{"running", id[:12]} {
		if err := p.Delete(ctx, ref); !errors.Is(err, provider.ErrRefused) {
			t.Fatalf("delete %q: %v, want refused", ref, err)
		}
	}
}

func TestDeleteRemovalInProgressIsAccepted(t *testing.T) {
	sim, p := engine(t, dockertest.Docker)
	id := sim.Add("c", nil)
	sim.SetStatus(id, "removing")
	if err := p.Delete(context.Background(), id); err != nil {
		t.Fatalf("a removal already under way (409): %v, want accepted", err)
	}
}

func TestPodmanAnswers(t *testing.T) {
	sim, p := engine(t, dockertest.Podman)
	ctx := context.Background()
	id := sim.Add("c", nil)
	sim.Push("delete", 1, dockertest.Answer{Status: http.StatusInternalServerError, Message: "container " + id + " does not exist in database: no such container"})
	if err := p.Delete(ctx, id); !errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("podman's 500 for a container removed under the call: %v, want not found", err)
	}
	if _, err := p.Get(ctx, "0123456789ab"); !errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("podman 404: %v", err)
	}
	sim.Push("delete", 1, dockertest.Answer{Status: http.StatusInternalServerError, Message: "something broke"})
	if err := p.Delete(ctx, id); !errors.Is(err, provider.ErrUnavailable) {
		t.Fatalf("another 500: %v, want unavailable", err)
	}
}

func TestNetworksAndVolumes(t *testing.T) {
	for _, flavor := range []dockertest.Flavor{dockertest.Docker, dockertest.Podman} {
		sim, p := engine(t, flavor)
		ctx := context.Background()
		c := &http.Client{Transport: p.Engine().Transport()}
		post := func(path, body string) {
			t.Helper()
			resp, err := c.Post("http://docker"+path, "application/json", strings.NewReader(body))
			if err != nil || resp.StatusCode != http.StatusCreated {
				t.Fatalf("POST %s: %v %v", path, resp, err)
			}
			resp.Body.Close()
		}
		post("/networks/create", `{"Name":"n1","Labels":{"tether-owner":"o","tether-name":"network:n1"}}`)
		post("/volumes/create", `{"Name":"v1","Labels":{"tether-owner":"o"}}`)
		net, err := p.GetByName(ctx, "network:n1")
		if err != nil || !strings.HasPrefix(net.ID, docker.KindNetwork) || net.Name != "network:n1" {
			t.Fatalf("network by name: %+v %v", net, err)
		}
		vol, err := p.GetByName(ctx, "volume:v1")
		if err != nil || vol.ID != "volume:v1" || vol.Name != "volume:v1" {
			t.Fatalf("volume by name: %+v %v", vol, err)
		}
		all, err := p.List(ctx, map[string]string{owner: "o"})
		if err != nil || len(all) != 2 {
			t.Fatalf("list by label: %d %v", len(all), err)
		}
		// In use: refused, retryable, said as ErrInUse.
		post("/containers/create", `{"Image":"`+dockertest.Image+`","HostConfig":{"NetworkMode":"n1","Binds":["v1:/data"]}}`)
		cs := sim.Containers()
		cid := cs[len(cs)-1].ID
		resp, err := c.Post("http://docker/containers/"+cid+"/start", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		for _, id := range []string{net.ID, vol.ID} {
			err := p.Delete(ctx, id)
			if !errors.Is(err, provider.ErrInUse) || !provider.Retryable(err) {
				t.Fatalf("flavor %d: delete %s in use: %v, want ErrInUse", flavor, id, err)
			}
		}
		if err := p.Delete(ctx, cid); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{net.ID, vol.ID} {
			if err := p.Delete(ctx, id); err != nil {
				t.Fatalf("delete %s once its container is gone: %v", id, err)
			}
			if _, err := p.Get(ctx, id); !errors.Is(err, provider.ErrNotFound) {
				t.Fatalf("get %s after delete: %v", id, err)
			}
		}
	}
}

func TestUnreachable(t *testing.T) {
	e, err := docker.FindEngine(envOf(map[string]string{docker.EnvHost: "unix://" + filepath.Join(t.TempDir(), "none.sock")}))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := docker.New(docker.Config{Engine: e})
	err = p.Check(context.Background())
	if !errors.Is(err, provider.ErrUnreachable) || !strings.Contains(err.Error(), "is the engine running") {
		t.Fatalf("check of a socket that is not there: %v", err)
	}
	sim, p := engine(t, dockertest.Docker)
	if err := p.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	sim.SetFaults(dockertest.Faults{Down: true})
	if err := p.Check(context.Background()); !errors.Is(err, provider.ErrUnavailable) {
		t.Fatalf("an engine that cuts the connection: %v", err)
	}
}

func TestListPageKinds(t *testing.T) {
	sim, p := engine(t, dockertest.Docker)
	ctx := context.Background()
	running := sim.Add("r", map[string]string{owner: "o"})
	exited := sim.Add("e", map[string]string{owner: "o"})
	sim.Exit(exited)
	sim.Add("unowned", nil)
	page, next, err := p.ListPage(ctx, provider.AccountQuery{}, "")
	if err != nil || next == "" || len(page) != 2 {
		t.Fatalf("first page: %d items, next %q, %v", len(page), next, err)
	}
	for _, l := range page {
		switch l.ID {
		case running:
			if time.Since(l.LastActivityAt) > time.Minute {
				t.Errorf("a running container is active now: %v", l.LastActivityAt)
			}
		case exited:
			if l.LastActivityAt.IsZero() || l.State != provider.StateStopped {
				t.Errorf("an exited container: %+v", l)
			}
		}
	}
	pages := 1
	for next != "" {
		if _, next, err = p.ListPage(ctx, provider.AccountQuery{}, next); err != nil {
			t.Fatal(err)
		}
		pages++
	}
	if pages != 3 {
		t.Fatalf("pages: %d, want containers, networks, volumes", pages)
	}
}

func TestAccountIsTheEngineAddress(t *testing.T) {
	a, _ := docker.FindEngine(envOf(map[string]string{docker.EnvHost: "unix:///var/run/docker.sock"}))
	b, _ := docker.FindEngine(envOf(map[string]string{docker.EnvHost: "unix:///var/run//docker.sock"}))
	c, _ := docker.FindEngine(envOf(map[string]string{docker.EnvHost: "unix:///run/user/1000/docker.sock"}))
	if docker.Account(a) != docker.Account(b) || docker.Account(a) == docker.Account(c) || !strings.HasPrefix(docker.Account(a), "docker:") {
		t.Fatalf("accounts: %s %s %s", docker.Account(a), docker.Account(b), docker.Account(c))
	}
}
