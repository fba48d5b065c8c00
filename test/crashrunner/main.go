// Command crashrunner is the runner of the crash and soak tests (test/): it
// declares, creates, reports and deletes sandboxes through one of tether's
// three intakes, and dies (SIGKILL, when built with -tags crashpoints) at
// the runner-side crash point $TETHER_CRASHPOINT names: after the intent's
// acknowledgement before the create, after the create before the observe,
// after the observe.
//
//	crashrunner socket|spool|proxy ACTION...
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
//	created <intent> <name> <id>     the create answered; for the proxy the intent id is -
//	lost <intent> <name> -           the create failed; it may have landed
//	observed <intent> <name> <id>    tether acknowledged the id
//	deleted <intent> <name> <id>     deleted on Daytona and released
//	undeleted <intent> <name> <id>   the delete failed; tether's to do
//	ready
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	apiclient "github.com/daytonaio/daytona/libs/api-client-go"
	"github.com/oklog/ulid/v2"

	"github.com/tether-run/tether/intentapi"
	"github.com/tether-run/tether/intentapi/client"
	"github.com/tether-run/tether/internal/config"
	"github.com/tether-run/tether/internal/crashpoint"
	"github.com/tether-run/tether/internal/intake/spooldir"
	"github.com/tether-run/tether/spool"
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
	cloud  apiclient.SandboxAPI
	held   []held
}

func main() {
	if len(os.Args) < 2 {
		fail("usage: crashrunner socket|spool|proxy ACTION...")
	}
	fmt.Printf("pid %d\n", os.Getpid())
	r := &runner{intake: os.Args[1]}
	cfg := apiclient.NewConfiguration()
	cfg.Servers = apiclient.ServerConfigurations{{URL: os.Getenv("DAYTONA_API_URL")}}
	cfg.AddDefaultHeader("Authorization", "Bearer "+os.Getenv("DAYTONA_API_KEY"))
	cfg.HTTPClient = &http.Client{Timeout: callTimeout}
	r.cloud = apiclient.NewAPIClient(cfg).SandboxAPI
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
	for _, action := range os.Args[2:] {
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
	var intent, name string
	var labels map[string]string
	switch r.intake {
	case "socket":
		in, err := r.tether.CreateIntent(ctx, intentapi.CreateRequest{Labels: ownLabels, OnDrain: spool.DrainDelete})
		if err != nil {
			fail("declare: %v", err)
		}
		intent, name, labels = in.ID, in.Name, in.Labels
		fmt.Printf("acked %s %s -\n", intent, name)
	case "spool":
		intent = strings.ToLower(ulid.Make().String())
		if _, err := spooldir.Write(r.spool, spooldir.FileOp{Op: spooldir.OpIntent, ID: intent, Labels: ownLabels, OnDrain: spool.DrainDelete}); err != nil {
			fail("write the spool file: %v", err)
		}
		in := spool.Plan(r.owner, spool.NewIntent{ID: intent, Labels: spool.MergeLabels(r.scope, ownLabels), OnDrain: spool.DrainDelete}, time.Now().UTC())
		name, labels = in.Name, in.Labels
		fmt.Printf("written %s %s -\n", intent, name)
	case "proxy":
		intent, labels = "-", ownLabels
	}
	crashpoint.Hit(crashpoint.RunnerAfterAck)
	if action == "declare" {
		return
	}
	req := apiclient.NewCreateSandbox()
	if name != "" {
		req.SetName(name)
	}
	req.SetLabels(labels)
	req.SetAutoStopInterval(0)
	sb, _, err := r.cloud.CreateSandbox(ctx).CreateSandbox(*req).Execute()
	if err != nil {
		fmt.Printf("lost %s %s - %v\n", intent, orDash(name), oneLine(err))
		return
	}
	name = sb.GetName()
	fmt.Printf("created %s %s %s\n", intent, name, sb.GetId())
	crashpoint.Hit(crashpoint.RunnerAfterCreate)
	if action == "unobserved" || r.intake == "proxy" {
		r.held = append(r.held, held{intent, name, sb.GetId()})
		return
	}
	switch r.intake {
	case "socket":
		if _, err := r.tether.Observe(ctx, intent, sb.GetId()); err != nil {
			fail("observe %s: %v", name, err)
		}
	case "spool":
		if _, err := spooldir.Write(r.spool, spooldir.FileOp{Op: spooldir.OpObserve, ID: intent, SandboxID: sb.GetId()}); err != nil {
			fail("write the observe file: %v", err)
		}
	}
	fmt.Printf("observed %s %s %s\n", intent, name, sb.GetId())
	crashpoint.Hit(crashpoint.RunnerAfterObserve)
	r.held = append(r.held, held{intent, name, sb.GetId()})
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
	if _, _, err := r.cloud.DeleteSandbox(ctx, h.id).Execute(); err != nil {
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
