// Command e2brunner is a runner that knows nothing of tether: it calls the
// E2B API as the official SDKs do (POST {E2B_API_URL}/sandboxes with
// X-API-Key, js-sdk src/sandbox/sandboxApi.ts; there is no official Go
// SDK), configured only from E2B_API_URL and E2B_API_KEY, and, for a
// runner that uses both clouds, Daytona through the official
// api-client-go from DAYTONA_API_URL and DAYTONA_API_KEY. Under `tether
// run` both URLs are tether's proxies.
//
// It runs the actions given as arguments in order, prints one line per
// event (four fields, as the end-to-end tests read them), then "ready",
// and then holds until it is killed (or exits 0 with the action "exit"):
//
//	pid <pid>                              always, first
//	e2b:N        created - e2b <id>        N E2B sandboxes, metadata runner=zero-code
//	timeout:S                              E2B creates from now on ask for S seconds (default 300)
//	kill:K       killed - e2b <id>         kills the first K E2B sandboxes it created
//	fork:K       forked - e2b <id>         forks each of the first K (count 1, the current timeout)
//	forks:N      forked - e2b <id>         forks the first one once with count N; one line per fork,
//	             fork-lost - e2b <parent>  or this one when the answer never came (the connection reset)
//	forkother:ID forked - e2b <id>         forks sandbox ID (one it did not create), count 1
//	pause:I      paused - e2b <id>         pauses the I-th E2B sandbox it created (from 0)
//	resume:I     resumed - e2b <id>        resumes it (the current timeout)
//	resumebg:I   resuming - e2b <id>       sends its resume and goes on without waiting for the answer
//	settimeout:S set - e2b <id>            sets the timeout of every E2B sandbox it created to S seconds
//	key:KEY                                E2B calls from now on carry this key
//	bearer:T@TEAM                          E2B calls from now on carry Authorization: Bearer T and
//	                                       X-Team-ID: TEAM instead of a key
//	daytona:N    created - daytona <id>    N Daytona sandboxes
//	url          url - <E2B_API_URL> -
//	exit                                   exit 0 after "ready"
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"strconv"
	"strings"
	"sync"

	apiclient "github.com/daytonaio/daytona/libs/api-client-go"
	"github.com/tether-run/tether/test/internal/runner"
)

func main() {
	cfg := apiclient.NewConfiguration()
	cfg.Servers = apiclient.ServerConfigurations{{URL: os.Getenv("DAYTONA_API_URL")}}
	cfg.AddDefaultHeader("Authorization", "Bearer "+os.Getenv("DAYTONA_API_KEY"))
	daytona := apiclient.NewAPIClient(cfg).SandboxAPI

	var held []string
	timeout := 300
	at := func(arg string) string {
		i, err := strconv.Atoi(arg)
		if err != nil || i < 0 || i >= len(held) {
			fail("no sandbox %q", arg)
		}
		return held[i]
	}
	runner.Run("e2brunner", "E2B_API_URL", func(ctx context.Context, verb, arg string) bool {
		n, _ := strconv.Atoi(arg)
		switch verb {
		case "e2b":
			for range n {
				var sb struct {
					SandboxID string `json:"sandboxID"`
				}
				body := map[string]any{"templateID": "base", "timeout": timeout, "metadata": map[string]string{"runner": "zero-code"}}
				if code := call(ctx, http.MethodPost, "/sandboxes", body, &sb); code != http.StatusCreated {
					fail("create: %d", code)
				}
				held = append(held, sb.SandboxID)
				fmt.Printf("created - e2b %s\n", sb.SandboxID)
			}
		case "timeout":
			timeout = n
		case "fork":
			for _, id := range held[:n] {
				var results []struct {
					Sandbox struct {
						SandboxID string `json:"sandboxID"`
					} `json:"sandbox"`
				}
				if code := call(ctx, http.MethodPost, "/sandboxes/"+id+"/fork", map[string]any{"timeout": timeout, "count": 1}, &results); code != http.StatusCreated || len(results) != 1 {
					fail("fork %s: %d", id, code)
				}
				fmt.Printf("forked - e2b %s\n", results[0].Sandbox.SandboxID)
			}
		case "forks":
			forks(ctx, held[0], n, timeout)
		case "forkother":
			var results []struct {
				Sandbox struct {
					SandboxID string `json:"sandboxID"`
				} `json:"sandbox"`
			}
			if code := call(ctx, http.MethodPost, "/sandboxes/"+arg+"/fork", map[string]any{"timeout": timeout, "count": 1}, &results); code != http.StatusCreated || len(results) != 1 {
				fail("fork %s: %d", arg, code)
			}
			fmt.Printf("forked - e2b %s\n", results[0].Sandbox.SandboxID)
		case "pause":
			id := at(arg)
			if code := call(ctx, http.MethodPost, "/sandboxes/"+id+"/pause", nil, nil); code != http.StatusNoContent {
				fail("pause %s: %d", id, code)
			}
			fmt.Printf("paused - e2b %s\n", id)
		case "resume":
			id := at(arg)
			if code := call(ctx, http.MethodPost, "/sandboxes/"+id+"/resume", map[string]any{"timeout": timeout}, nil); code != http.StatusCreated {
				fail("resume %s: %d", id, code)
			}
			fmt.Printf("resumed - e2b %s\n", id)
		case "resumebg":
			id := at(arg)
			ctx, sent, done := withSent(context.Background()) // not the action's: the resume outlives it
			go func() {
				defer done()
				try(ctx, http.MethodPost, "/sandboxes/"+id+"/resume", map[string]any{"timeout": timeout}, nil)
			}()
			<-sent
			fmt.Printf("resuming - e2b %s\n", id)
		case "settimeout":
			for _, id := range held {
				if code := call(ctx, http.MethodPost, "/sandboxes/"+id+"/timeout", map[string]any{"timeout": n}, nil); code != http.StatusNoContent {
					fail("timeout %s: %d", id, code)
				}
				fmt.Printf("set - e2b %s\n", id)
			}
		case "key":
			auth = func(h http.Header) { h.Set("X-API-Key", arg) }
		case "bearer":
			token, team, _ := strings.Cut(arg, "@")
			auth = func(h http.Header) {
				h.Set("Authorization", "Bearer "+token)
				h.Set("X-Team-ID", team)
			}
		case "kill":
			for _, id := range held[:n] {
				if code := call(ctx, http.MethodDelete, "/sandboxes/"+id, nil, nil); code != http.StatusNoContent {
					fail("kill %s: %d", id, code)
				}
				fmt.Printf("killed - e2b %s\n", id)
			}
		case "daytona":
			for range n {
				sb, _, err := daytona.CreateSandbox(ctx).CreateSandbox(*apiclient.NewCreateSandbox()).Execute()
				if err != nil {
					fail("daytona create: %v", err)
				}
				fmt.Printf("created - daytona %s\n", sb.GetId())
			}
		default:
			return false
		}
		return true
	})
}

// forks forks parent once with count n and prints each fork, or that the
// answer was lost.
func forks(ctx context.Context, parent string, n, timeout int) {
	var results []struct {
		Sandbox *struct {
			SandboxID string `json:"sandboxID"`
		} `json:"sandbox"`
	}
	code, err := try(ctx, http.MethodPost, "/sandboxes/"+parent+"/fork", map[string]any{"timeout": timeout, "count": n}, &results)
	if err != nil {
		fmt.Printf("fork-lost - e2b %s\n", parent)
		return
	}
	if code != http.StatusCreated || len(results) != n {
		fail("fork %s count %d: %d", parent, n, code)
	}
	for _, res := range results {
		if res.Sandbox == nil {
			fail("fork %s: a fork failed to start", parent)
		}
		fmt.Printf("forked - e2b %s\n", res.Sandbox.SandboxID)
	}
}

// call makes one E2B API call and returns its status.
func call(ctx context.Context, method, path string, in, out any) int {
	code, err := try(ctx, method, path, in, out)
	if err != nil {
		fail("%s %s: %v", method, path, err)
	}
	return code
}

// try makes one E2B API call and returns its status, or the error of a
// call that got no answer.
func try(ctx context.Context, method, path string, in, out any) (int, error) {
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(os.Getenv("E2B_API_URL"), "/")+path, body)
	if err != nil {
		fail("%v", err)
	}
	auth(req.Header)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			fail("%s %s: %v", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

// auth sets the credentials of an E2B call: E2B_API_KEY, unless the
// actions key or bearer changed them.
var auth = func(h http.Header) { h.Set("X-API-Key", os.Getenv("E2B_API_KEY")) }

// withSent is ctx with sent closed once its request has been written
// (the call is then on its way, whatever becomes of its answer), or when
// done is called.
func withSent(ctx context.Context) (context.Context, <-chan struct{}, func()) {
	sent := make(chan struct{})
	var once sync.Once
	done := func() { once.Do(func() { close(sent) }) }
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { done() },
	}), sent, done
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "e2brunner: "+format+"\n", args...)
	os.Exit(1)
}
