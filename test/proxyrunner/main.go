// Command proxyrunner is a runner that knows nothing of tether: it talks
// to Daytona through the official api-client-go, configured only from
// DAYTONA_API_URL and DAYTONA_API_KEY, as an unchanged agent runner would.
// Under `tether run` its DAYTONA_API_URL is tether's Daytona API proxy.
//
// It runs the actions given as arguments in order, prints one line per
// event (four fields, as the end-to-end tests read them), then "ready",
// and then holds until it is killed (or exits 0 with the action "exit"):
//
//	pid <pid>                              always, first
//	create:N     created - <name> <id>     N sandboxes, no name, label runner=zero-code
//	named:NAME   created - <name> <id>     one sandbox named NAME, labels runner, job
//	delete:K     deleted - <name> <id>     deletes the first K it created
//	labels:K     relabelled - <name> <id>  replaces the labels of the first K by {runner: relabelled}
//	fork:K       forked - <name> <id>      forks each of the first K (no name)
//	autostop0:K  autostop - <name> <id>    sets auto-stop 0 ("never") on the first K
//	fail         failed - <status> -       a create expected to fail
//	clash:NAME   failed - <status> -       a create named NAME expected to fail (the name is taken)
//	hangup:D     hungup - - -              a create it gives up on after D
//	url          url - <DAYTONA_API_URL> -
//	snapshot:S                             create from snapshot S from now on
//	key:KEY                                use KEY from now on, not DAYTONA_API_KEY
//	stop:I, start:I, archive:I             that call on the I-th it created (from 0):
//	             stopped|started|archived - <name> <id>
//	sleep:D                                wait D
//	exit                                   exit 0 after "ready"
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	apiclient "github.com/daytonaio/daytona/libs/api-client-go"
	"github.com/tether-run/tether/test/internal/runner"
)

type sandbox struct{ id, name string }

func main() {
	newAPI := func(key string) apiclient.SandboxAPI {
		cfg := apiclient.NewConfiguration()
		cfg.Servers = apiclient.ServerConfigurations{{URL: os.Getenv("DAYTONA_API_URL")}}
		cfg.AddDefaultHeader("Authorization", "Bearer "+key)
		cfg.AddDefaultHeader("X-Daytona-Source", "proxyrunner")
		return apiclient.NewAPIClient(cfg).SandboxAPI
	}
	api := newAPI(os.Getenv("DAYTONA_API_KEY"))

	var held []sandbox
	snapshot := ""
	runner.Run("proxyrunner", "DAYTONA_API_URL", func(ctx context.Context, verb, arg string) bool {
		switch verb {
		case "create", "named":
			n, name := 1, ""
			if verb == "create" {
				n, _ = strconv.Atoi(arg)
			} else {
				name = arg
			}
			for range n {
				req := apiclient.NewCreateSandbox()
				labels := map[string]string{"runner": "zero-code"}
				if name != "" {
					req.SetName(name)
					labels["job"] = "j-" + name
				}
				req.SetLabels(labels)
				if snapshot != "" {
					req.SetSnapshot(snapshot)
				}
				sb, _, err := api.CreateSandbox(ctx).CreateSandbox(*req).Execute()
				if err != nil {
					fail("create: %v", err)
				}
				held = append(held, sandbox{sb.GetId(), sb.GetName()})
				fmt.Printf("created - %s %s\n", sb.GetName(), sb.GetId())
			}
		case "spoof":
			// A runner that copies the labels of its first sandbox, tether's
			// included, into a new create with auto-stop off: a create that
			// names no live intent of its own.
			first, _, err := api.GetSandbox(ctx, held[0].id).Execute()
			if err != nil {
				fail("read %s: %v", held[0].id, err)
			}
			req := apiclient.NewCreateSandbox()
			req.SetLabels(first.GetLabels())
			req.SetAutoStopInterval(0)
			sb, _, err := api.CreateSandbox(ctx).CreateSandbox(*req).Execute()
			if err != nil {
				fail("spoofed create: %v", err)
			}
			held = append(held, sandbox{sb.GetId(), sb.GetName()})
			fmt.Printf("created - %s %s\n", sb.GetName(), sb.GetId())
		case "delete":
			k, _ := strconv.Atoi(arg)
			for _, sb := range held[:k] {
				if _, _, err := api.DeleteSandbox(ctx, sb.id).Execute(); err != nil {
					fail("delete %s: %v", sb.id, err)
				}
				fmt.Printf("deleted - %s %s\n", sb.name, sb.id)
			}
		case "labels":
			k, _ := strconv.Atoi(arg)
			for _, sb := range held[:k] {
				labels := apiclient.NewSandboxLabels(map[string]string{"runner": "relabelled"})
				if _, _, err := api.ReplaceLabels(ctx, sb.id).SandboxLabels(*labels).Execute(); err != nil {
					fail("labels %s: %v", sb.id, err)
				}
				fmt.Printf("relabelled - %s %s\n", sb.name, sb.id)
			}
		case "fork":
			k, _ := strconv.Atoi(arg)
			for _, sb := range held[:k] {
				f, _, err := api.ForkSandbox(ctx, sb.id).ForkSandbox(*apiclient.NewForkSandbox()).Execute()
				if err != nil {
					fail("fork %s: %v", sb.id, err)
				}
				fmt.Printf("forked - %s %s\n", f.GetName(), f.GetId())
			}
		case "autostop0":
			k, _ := strconv.Atoi(arg)
			for _, sb := range held[:k] {
				if _, _, err := api.SetAutostopInterval(ctx, sb.id, 0).Execute(); err != nil {
					fail("autostop %s: %v", sb.id, err)
				}
				fmt.Printf("autostop - %s %s\n", sb.name, sb.id)
			}
		case "fail", "clash":
			req := apiclient.NewCreateSandbox()
			if verb == "clash" {
				req.SetName(arg)
			}
			_, resp, err := api.CreateSandbox(ctx).CreateSandbox(*req).Execute()
			if err == nil || resp == nil {
				fail("create should have failed with an answer: %v", err)
			}
			fmt.Printf("failed - %d -\n", resp.StatusCode)
		case "hangup":
			d, err := time.ParseDuration(arg)
			if err != nil {
				fail("hangup: %v", err)
			}
			short, stop := context.WithTimeout(ctx, d)
			_, _, err = api.CreateSandbox(short).CreateSandbox(*apiclient.NewCreateSandbox()).Execute()
			stop()
			if err == nil {
				fail("create should have outlasted %s", d)
			}
			fmt.Println("hungup - - -")
		case "snapshot":
			snapshot = arg
		case "key":
			api = newAPI(arg)
		case "stop", "start", "archive":
			i, err := strconv.Atoi(arg)
			if err != nil || i < 0 || i >= len(held) {
				fail("%s: no sandbox %q", verb, arg)
			}
			lifecycle(ctx, api, verb, held[i])
		case "sleep":
			d, err := time.ParseDuration(arg)
			if err != nil {
				fail("sleep: %v", err)
			}
			time.Sleep(d)
		default:
			return false
		}
		return true
	})
}

// lifecycle makes one of the SDKs' Stop, Start or Archive calls.
func lifecycle(ctx context.Context, api apiclient.SandboxAPI, verb string, sb sandbox) {
	var err error
	switch verb {
	case "stop":
		_, _, err = api.StopSandbox(ctx, sb.id).Execute()
	case "start":
		_, _, err = api.StartSandbox(ctx, sb.id).Execute()
	case "archive":
		_, _, err = api.ArchiveSandbox(ctx, sb.id).Execute()
	}
	if err != nil {
		fail("%s %s: %v", verb, sb.id, err)
	}
	done := map[string]string{"stop": "stopped", "start": "started", "archive": "archived"}[verb]
	fmt.Printf("%s - %s %s\n", done, sb.name, sb.id)
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "proxyrunner: "+format+"\n", a...)
	os.Exit(1)
}
