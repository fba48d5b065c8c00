// Command runner is a Go runner that creates Daytona sandboxes under
// tether: it declares each sandbox to tether (the intent API over the Unix
// socket in $TETHER_SOCKET, with intentapi/client) before creating it with
// the name and labels tether chose, then reports the sandbox id. When its
// work is done it deletes the sandbox itself and releases the intent. If
// it is killed first (docker stop, OOM, a crash), tether deletes what it
// left.
//
//	tether run -- runner [--sandboxes N] [--label RUN] [--hold]
//
// --hold keeps the sandboxes until the process is killed, as a runner
// stopped mid-job; it prints "ready" once they exist.
//
// Of tether it imports only public packages, the intent API's client and
// types; Daytona it calls with Daytona's own Go client (api-client-go),
// configured from DAYTONA_API_URL and DAYTONA_API_KEY as Daytona's SDKs
// read them. Copy it, and put your agent's work where it says.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	apiclient "github.com/daytonaio/daytona/libs/api-client-go"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/intentapi"
	"github.com/tether-run/tether/intentapi/client"
)

// autoStopMinutes is Daytona's own idle auto-stop for each sandbox: a
// runner should keep Daytona's cleanup on; tether is the one that does not
// wait.
const autoStopMinutes = 15

func main() {
	sandboxes := flag.Int("sandboxes", 1, "sandboxes to create")
	// Each start is a new run: a restarted container must not reuse the
	// keys of the sandboxes its previous start declared (and tether drained).
	label := flag.String("label", fmt.Sprintf("go-%d-%d", os.Getpid(), time.Now().UnixMilli()), "value of the run=<label> label, and the prefix of each intent's key")
	hold := flag.Bool("hold", false, `keep the sandboxes until killed; print "ready" once they exist`)
	flag.Parse()
	if err := run(context.Background(), *sandboxes, *label, *hold); err != nil {
		fmt.Fprintf(os.Stderr, "runner: %v\n", err)
		os.Exit(1)
	}
}

// held is one sandbox the runner made, with the intent that declared it.
type held struct {
	in        intentapi.Intent
	sandboxID string
}

func run(ctx context.Context, n int, label string, hold bool) error {
	sock := os.Getenv("TETHER_SOCKET")
	if sock == "" {
		return fmt.Errorf("TETHER_SOCKET is not set: run me under tether run")
	}
	tether := client.New(sock)
	daytona, ctx, err := daytonaFromEnv(ctx)
	if err != nil {
		return err
	}

	var all []held
	for i := range n {
		// Declare first: tether journals the intent before it answers.
		in, err := tether.CreateIntent(ctx, intentapi.CreateRequest{
			Labels:  map[string]string{"run": label},
			OnDrain: intent.DrainDelete,
			Key:     fmt.Sprintf("%s-%d", label, i), // a retried declare is harmless
		})
		if err != nil {
			return fmt.Errorf("declare: %w", err)
		}
		// Create with exactly tether's name and labels, then report the id.
		req := apiclient.NewCreateSandbox()
		req.SetName(in.Name)
		req.SetLabels(in.Labels)
		req.SetAutoStopInterval(autoStopMinutes)
		sb, _, err := daytona.SandboxAPI.CreateSandbox(ctx).CreateSandbox(*req).Execute()
		if err != nil {
			return fmt.Errorf("create %s: %w", in.Name, err)
		}
		if _, err := tether.Observe(ctx, in.ID, sb.Id); err != nil {
			return fmt.Errorf("observe %s: %w", in.Name, err)
		}
		all = append(all, held{in, sb.Id})
		fmt.Printf("created %s %s %s\n", in.ID, in.Name, sb.Id)
	}
	if hold {
		fmt.Println("ready")
		// Killed mid-job: no cleanup runs. A signal ends the process as it
		// ends any runner without a handler, and tether deletes the rest.
		for {
			time.Sleep(time.Hour)
		}
	}

	// ... the agent's work would happen here ...

	for _, h := range all {
		// The runner's own cleanup, then tell tether it is handled.
		if _, _, err := daytona.SandboxAPI.DeleteSandbox(ctx, h.sandboxID).Execute(); err != nil {
			return fmt.Errorf("delete %s: %w", h.in.Name, err)
		}
		if _, err := tether.Release(ctx, h.in.ID, "deleted"); err != nil {
			return fmt.Errorf("release %s: %w", h.in.Name, err)
		}
		fmt.Printf("released %s %s %s\n", h.in.ID, h.in.Name, h.sandboxID)
	}
	return nil
}

// daytonaFromEnv is Daytona's client as its SDKs configure it:
// DAYTONA_API_URL (under tether run, tether's Daytona API proxy, unless
// --daytona-proxy=false) and DAYTONA_API_KEY, in the context of its calls.
func daytonaFromEnv(ctx context.Context) (*apiclient.APIClient, context.Context, error) {
	key := os.Getenv("DAYTONA_API_KEY")
	if key == "" {
		return nil, nil, errors.New("DAYTONA_API_KEY is not set")
	}
	apiURL := strings.TrimSuffix(os.Getenv("DAYTONA_API_URL"), "/")
	if apiURL == "" {
		apiURL = "https://app.daytona.io/api"
	}
	cfg := apiclient.NewConfiguration()
	cfg.Servers = apiclient.ServerConfigurations{{URL: apiURL}}
	return apiclient.NewAPIClient(cfg), context.WithValue(ctx, apiclient.ContextAccessToken, key), nil
}
