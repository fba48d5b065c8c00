// Command crashrunner is the runner of the crash and soak tests (test/): it
// declares, creates, reports and deletes sandboxes through one of tether's
// three intakes, and dies (SIGKILL, when built with -tags crashpoints) at
// the runner-side crash point $TETHER_CRASHPOINT names: after the intent's
// acknowledgement before the create, after the create before the observe,
// after the observe. It creates in Daytona (the official api-client-go,
// from DAYTONA_API_URL and DAYTONA_API_KEY) or in E2B (provider/e2b's
// client, which makes the SDKs' calls: POST /sandboxes with metadata and
// timeout, DELETE /sandboxes/{id}, from E2B_API_URL and E2B_API_KEY), or
// in a Docker engine (the docker CLI's create and start, at DOCKER_HOST).
// Under the proxy intake the URL (DOCKER_HOST) is tether's proxy.
//
//	crashrunner daytona|e2b|docker socket|spool|proxy ACTION...
//
// Actions, run in order:
//
//	create      declare, create, report the id (proxy: create through it)
//	unobserved  declare and create, never report the id (socket, spool)
//	declare     declare only; the create never comes (socket, spool)
//	delete      delete the oldest sandbox held, then release its intent
//	exit        exit 0 after "ready" (else it holds until killed)
//
// It prints one line per event, four fields, as the tests read them:
//
//	pid <pid>
//	acked <intent> <name> -          tether acknowledged the intent (socket: its 201)
//	written <intent> <name> -        the spool file is written (tether acks by taking it)
//	created <intent> <name> <id>     the create answered; for the proxy the intent id is -,
//	                                 and for E2B's the name too (its answer has none)
//	lost <intent> <name> -           the create failed; it may have landed
//	observed <intent> <name> <id>    tether acknowledged the id
//	deleted <intent> <name> <id>     deleted in the cloud and released
//	undeleted <intent> <name> <id>   the delete failed; tether's to do
//	ready
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	apiclient "github.com/daytonaio/daytona/libs/api-client-go"
	"github.com/oklog/ulid/v2"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/intentapi"
	"github.com/tether-run/tether/intentapi/client"
	"github.com/tether-run/tether/internal/config"
	"github.com/tether-run/tether/internal/crashpoint"
	"github.com/tether-run/tether/internal/intake/spooldir"
	"github.com/tether-run/tether/provider/docker"
	"github.com/tether-run/tether/provider/docker/dockertest"
	"github.com/tether-run/tether/provider/e2b"
)

// callTimeout bounds every call the runner waits for.
const callTimeout = 30 * time.Second

type held struct{ intent, name, id string }

type runner struct {
	intake string
	tether *client.Client
	spool  string
	owner  string
	scope  map[string]string
	cloud  cloud
	held   []held
}

func main() {
	if len(os.Args) < 3 {
		fail("usage: crashrunner daytona|e2b|docker socket|spool|proxy ACTION...")
	}
	fmt.Printf("pid %d\n", os.Getpid())
	r := &runner{intake: os.Args[2], cloud: newCloud(os.Args[1])}
	switch r.intake {
	case "socket":
		r.tether = client.New(os.Getenv(config.EnvSocket))
	case "spool":
		r.spool, r.owner = os.Getenv(config.EnvSpool), os.Getenv(config.EnvOwner)
		if l := os.Getenv(config.EnvLabels); l != "" {
			scope, err := config.ParseLabels(l)
			if err != nil {
				fail("$%s: %v", config.EnvLabels, err)
			}
			r.scope = scope
		}
	case "proxy":
	default:
		fail("unknown intake %q", r.intake)
	}
	exit := false
	for _, action := range os.Args[3:] {
		switch action {
		case "create", "unobserved", "declare":
			r.sandbox(action)
		case "delete":
			r.delete()
		case "exit":
			exit = true
		default:
			fail("unknown action %q", action)
		}
	}
	fmt.Println("ready")
	if exit {
		return
	}
	for { // held until killed: no cleanup ever runs
		time.Sleep(time.Hour)
	}
}

// labels every sandbox of this runner carries, besides tether's.
var ownLabels = map[string]string{"runner": "crash"}

func (r *runner) sandbox(action string) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	var intentID, name string
	var labels map[string]string
	switch r.intake {
	case "socket":
		in, err := r.tether.CreateIntent(ctx, intentapi.CreateRequest{Labels: ownLabels, OnDrain: intent.DrainDelete, Provider: r.cloud.provider()})
		if err != nil {
			fail("declare: %v", err)
		}
		intentID, name, labels = in.ID, in.Name, in.Labels
		fmt.Printf("acked %s %s -\n", intentID, name)
	case "spool":
		intentID = strings.ToLower(ulid.Make().String())
		if _, err := spooldir.Write(r.spool, spooldir.FileOp{Op: spooldir.OpIntent, ID: intentID, Labels: ownLabels, OnDrain: intent.DrainDelete, Provider: r.cloud.provider()}); err != nil {
			fail("write the spool file: %v", err)
		}
		in := intent.Plan(r.owner, intent.Declaration{ID: intentID, Labels: intent.MergeLabels(r.scope, ownLabels), OnDrain: intent.DrainDelete}, time.Now().UTC())
		name, labels = in.Name, in.Labels
		fmt.Printf("written %s %s -\n", intentID, name)
	case "proxy":
		intentID, labels = "-", ownLabels
	}
	crashpoint.Hit(crashpoint.RunnerAfterAck)
	if action == "declare" {
		return
	}
	id, got, err := r.cloud.create(ctx, name, labels)
	if err != nil {
		fmt.Printf("lost %s %s - %v\n", intentID, orDash(name), oneLine(err))
		return
	}
	name = orDash(got)
	fmt.Printf("created %s %s %s\n", intentID, name, id)
	crashpoint.Hit(crashpoint.RunnerAfterCreate)
	if action == "unobserved" || r.intake == "proxy" {
		r.held = append(r.held, held{intentID, name, id})
		return
	}
	switch r.intake {
	case "socket":
		if _, err := r.tether.Observe(ctx, intentID, id); err != nil {
			fail("observe %s: %v", name, err)
		}
	case "spool":
		if _, err := spooldir.Write(r.spool, spooldir.FileOp{Op: spooldir.OpObserve, ID: intentID, SandboxID: id}); err != nil {
			fail("write the observe file: %v", err)
		}
	}
	fmt.Printf("observed %s %s %s\n", intentID, name, id)
	crashpoint.Hit(crashpoint.RunnerAfterObserve)
	r.held = append(r.held, held{intentID, name, id})
}

// delete deletes the oldest sandbox held and releases its intent. A delete
// that fails leaves it to tether.
func (r *runner) delete() {
	if len(r.held) == 0 {
		return
	}
	h := r.held[0]
	r.held = r.held[1:]
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := r.cloud.delete(ctx, h.id); err != nil {
		fmt.Printf("undeleted %s %s %s %v\n", h.intent, h.name, h.id, oneLine(err))
		return
	}
	switch r.intake {
	case "socket":
		if _, err := r.tether.Release(ctx, h.intent, "deleted"); err != nil {
			fail("release %s: %v", h.name, err)
		}
	case "spool":
		if _, err := spooldir.Write(r.spool, spooldir.FileOp{Op: spooldir.OpRelease, ID: h.intent, Outcome: "deleted"}); err != nil {
			fail("write the release file: %v", err)
		}
	}
	fmt.Printf("deleted %s %s %s\n", h.intent, h.name, h.id)
}

// cloud is where the runner creates and deletes its sandboxes.
type cloud interface {
	// provider names the cloud to tether ("" for its default, Daytona).
	provider() string
	// create makes a sandbox named name (if not empty) carrying labels,
	// and returns its id and name (empty if the cloud gave none).
	create(ctx context.Context, name string, labels map[string]string) (id, got string, err error)
	delete(ctx context.Context, id string) error
}

func newCloud(name string) cloud {
	switch name {
	case "daytona":
		cfg := apiclient.NewConfiguration()
		cfg.Servers = apiclient.ServerConfigurations{{URL: os.Getenv("DAYTONA_API_URL")}}
		cfg.AddDefaultHeader("Authorization", "Bearer "+os.Getenv("DAYTONA_API_KEY"))
		cfg.HTTPClient = &http.Client{Timeout: callTimeout}
		return daytonaCloud{apiclient.NewAPIClient(cfg).SandboxAPI}
	case "e2b":
		cfg, err := e2b.ConfigFromEnv()
		if err != nil {
			fail("%v", err)
		}
		cfg.CallTimeout = callTimeout
		cfg.Logger = slog.New(slog.DiscardHandler)
		p, err := e2b.New(cfg)
		if err != nil {
			fail("e2b client: %v", err)
		}
		return e2bCloud{p}
	case "docker":
		e, err := docker.FindEngine(os.Getenv)
		if err != nil {
			fail("%v", err)
		}
		return dockerCloud{e: e, hc: &http.Client{Transport: e.Transport(), Timeout: callTimeout}}
	}
	fail("unknown cloud %q", name)
	return nil
}

// dockerCloud creates a container of the simulated engine's image
// (dockertest.Image) as the docker CLI does (POST /containers/create
// ?name=, then start) at DOCKER_HOST, which under the proxy intake is
// tether's proxy. A zero-code runner names none, and learns only the id.
type dockerCloud struct {
	e  docker.Engine
	hc *http.Client
}

func (dockerCloud) provider() string { return docker.ProviderName }

func (c dockerCloud) do(ctx context.Context, method, path string, body any, want int, out any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.e.URL()+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

func (c dockerCloud) create(ctx context.Context, name string, labels map[string]string) (string, string, error) {
	path := "/v1.41/containers/create"
	if name != "" {
		path += "?name=" + url.QueryEscape(name)
	}
	var ans struct{ Id string }
	body := map[string]any{"Image": dockertest.Image, "Cmd": []string{"sleep", "1000"}, "Labels": labels}
	if err := c.do(ctx, http.MethodPost, path, body, http.StatusCreated, &ans); err != nil {
		return "", "", err
	}
	if err := c.do(ctx, http.MethodPost, "/v1.41/containers/"+ans.Id+"/start", nil, http.StatusNoContent, nil); err != nil {
		return ans.Id, name, err
	}
	return ans.Id, name, nil
}

func (c dockerCloud) delete(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1.41/containers/"+id+"?force=1&v=1", nil, http.StatusNoContent, nil)
}

type daytonaCloud struct{ api apiclient.SandboxAPI }

func (daytonaCloud) provider() string { return "" }

func (c daytonaCloud) create(ctx context.Context, name string, labels map[string]string) (string, string, error) {
	req := apiclient.NewCreateSandbox()
	if name != "" {
		req.SetName(name)
	}
	req.SetLabels(labels)
	req.SetAutoStopInterval(0)
	sb, _, err := c.api.CreateSandbox(ctx).CreateSandbox(*req).Execute()
	if err != nil {
		return "", "", err
	}
	return sb.GetId(), sb.GetName(), nil
}

func (c daytonaCloud) delete(ctx context.Context, id string) error {
	_, _, err := c.api.DeleteSandbox(ctx, id).Execute()
	return err
}

// e2bCloud names a sandbox by its metadata (e2b.MetadataName), as tether
// finds it; a zero-code runner names none, and learns only the id.
type e2bCloud struct{ p *e2b.Provider }

func (e2bCloud) provider() string { return e2b.ProviderName }

func (c e2bCloud) create(ctx context.Context, name string, labels map[string]string) (string, string, error) {
	sb, err := c.p.Create(ctx, name, labels, e2b.CreateOptions{})
	return sb.ID, sb.Name, err
}

func (c e2bCloud) delete(ctx context.Context, id string) error { return c.p.Delete(ctx, id) }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", " ") }

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "crashrunner: "+format+"\n", args...)
	os.Exit(1)
}
