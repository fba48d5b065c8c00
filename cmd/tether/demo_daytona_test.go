package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	apiclient "github.com/daytonaio/daytona/libs/api-client-go"

	"github.com/tether-run/tether/internal/providers"
	"github.com/tether-run/tether/internal/testutil"
)

// localSim is a running `tether demo NAME` (a provider's simulator), as a
// real process.
type localSim struct {
	cmd      *exec.Cmd
	name     string // the provider
	url, key string
	addr     string // host:port, for ls
	done     chan struct{}
	waitErr  error
}

// startLocalDaytona starts `tether demo daytona --addr 127.0.0.1:0 ARGS`.
func startLocalDaytona(t *testing.T, args ...string) *localSim {
	t.Helper()
	d := startLocalSim(t, "daytona", "DAYTONA_API_URL", "DAYTONA_API_KEY", args...)
	d.addr = strings.TrimSuffix(strings.TrimPrefix(d.url, "http://"), "/api")
	return d
}

// startLocalSim starts `tether demo NAME --addr 127.0.0.1:0 ARGS` and
// reads the URL and key from the export lines it prints (of urlVar and
// keyVar), as a user would paste them.
func startLocalSim(t *testing.T, name, urlVar, keyVar string, args ...string) *localSim {
	t.Helper()
	cmd := exec.Command(tetherBin, append([]string{"demo", name, "--addr", "127.0.0.1:0"}, args...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &localSim{cmd: cmd, name: name, done: make(chan struct{})}
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	go func() {
		d.waitErr = cmd.Wait()
		close(d.done)
	}()
	t.Cleanup(func() {
		select {
		case <-d.done:
		default:
			_ = cmd.Process.Kill()
			<-d.done
		}
	})
	timeout := time.After(waitLimit)
	for d.url == "" || d.key == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("tether demo %s exited before printing the export lines: %v", name, d.waitErr)
			}
			if v, ok := strings.CutPrefix(l, "export "+urlVar+"="); ok {
				d.url = v
			}
			if v, ok := strings.CutPrefix(l, "export "+keyVar+"="); ok {
				d.key = v
			}
		case <-timeout:
			t.Fatalf("tether demo %s printed no export lines within %s", name, waitLimit)
		}
	}
	d.addr = strings.TrimPrefix(d.url, "http://")
	go func() {
		for range lines { // keep the pipe flowing
		}
	}()
	return d
}

// ls runs `tether demo NAME ls --addr ADDR ARGS` and returns its stdout.
func (d *localSim) ls(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(tetherBin, append([]string{"demo", d.name, "ls", "--addr", d.addr}, args...)...).Output()
	if err != nil {
		t.Fatalf("tether demo %s ls: %v", d.name, err)
	}
	return string(out)
}

// stop sends SIGTERM and wants exit 0.
func (d *localSim) stop(t *testing.T) {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.done:
	case <-time.After(waitLimit):
		t.Fatalf("tether demo %s still running %s after SIGTERM", d.name, waitLimit)
	}
	if d.waitErr != nil {
		t.Errorf("exit after SIGTERM: %v, want 0", d.waitErr)
	}
}

// row returns the ls line of one sandbox id.
func lsRow(out, id string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, id+" ") {
			return l
		}
	}
	return ""
}

// TestDemoDaytonaServesTheAPI: the official api-client-go creates and
// deletes against `tether demo daytona`; ls and GET /_sim/sandboxes show
// each sandbox's fate, the delete's client named; SIGTERM ends it with 0.
func TestDemoDaytonaServesTheAPI(t *testing.T) {
	d := startLocalDaytona(t, "--minute", "0")
	cfg := apiclient.NewConfiguration()
	cfg.Servers = apiclient.ServerConfigurations{{URL: d.url}}
	api := apiclient.NewAPIClient(cfg)
	ctx := context.WithValue(context.Background(), apiclient.ContextAccessToken, d.key)
	create := func(name string) string {
		req := apiclient.NewCreateSandbox()
		req.SetName(name)
		req.SetLabels(map[string]string{"try": "local"})
		sb, _, err := api.SandboxAPI.CreateSandbox(ctx).CreateSandbox(*req).Execute()
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		return sb.Id
	}
	gone, kept := create("goes"), create("stays")
	if _, _, err := api.SandboxAPI.DeleteSandbox(ctx, gone).Execute(); err != nil {
		t.Fatalf("delete: %v", err)
	}
	// A wrong key is refused, as by the real server.
	bad := context.WithValue(context.Background(), apiclient.ContextAccessToken, "not-the-key")
	if _, resp, err := api.SandboxAPI.GetSandbox(bad, kept).Execute(); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a wrong key: %v, want 401", err)
	}

	testutil.Eventually(t, "the deleted sandbox destroyed, by ls", func() (bool, string) {
		out := d.ls(t)
		row := lsRow(out, gone)
		return strings.Contains(row, " destroyed "), out
	})
	out := d.ls(t)
	if row := lsRow(out, gone); !strings.Contains(row, "goes") || !strings.Contains(row, "try=local") || !strings.Contains(row, "DELETE from api-client-go") {
		t.Errorf("the deleted sandbox's row: %q, want its creation name, label and the api-client-go as its deleter:\n%s", row, out)
	}
	if row := lsRow(out, kept); !strings.Contains(row, " started ") || !strings.HasSuffix(strings.TrimSpace(row), " -") {
		t.Errorf("the kept sandbox's row: %q, want started and never deleted:\n%s", row, out)
	}
	if !strings.Contains(out, "2 sandboxes, 1 never deleted") {
		t.Errorf("ls summary missing:\n%s", out)
	}

	var rec []providers.DemoSandbox
	if err := json.Unmarshal([]byte(d.ls(t, "--json")), &rec); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + d.addr + providers.RecordPath)
	if err != nil {
		t.Fatal(err)
	}
	var viaHTTP []providers.DemoSandbox
	err = json.NewDecoder(resp.Body).Decode(&viaHTTP)
	resp.Body.Close()
	if err != nil || len(rec) != 2 || len(viaHTTP) != 2 || rec[0].ID != gone || rec[0].DeletedBy == "" || rec[1].DeletedBy != "" {
		t.Errorf("GET %s: %+v (%v); ls --json: %+v", providers.RecordPath, viaHTTP, err, rec)
	}

	d.stop(t)
}

// TestDemoDaytonaTryItLocally is the README's "try it locally": tether run
// of the sample runner against `tether demo daytona`, then ls shows every
// sandbox destroyed, deleted by tether (the runner deleted none).
func TestDemoDaytonaTryItLocally(t *testing.T) {
	d := startLocalDaytona(t)
	cmd := exec.Command(tetherBin, "run", "--", tetherBin, "demo", "runner", "--sandboxes", "3", "--exit", "0")
	cmd.Env = append(os.Environ(), isolatedEnv(t)...)
	cmd.Env = append(cmd.Env, "DAYTONA_API_URL="+d.url, "DAYTONA_API_KEY="+d.key)
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tether run -- tether demo runner: %v\n%s", err, out)
	}
	n := 0
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "created ") {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("the runner created %d sandboxes, want 3:\n%s", n, out)
	}
	testutil.Eventually(t, "three sandboxes destroyed, deleted by tether", func() (bool, string) {
		ls := d.ls(t)
		return strings.Count(ls, " destroyed ") == 3 && strings.Count(ls, "DELETE from tether") == 3 && strings.Contains(ls, "3 sandboxes, 0 never deleted"), ls
	})
	// Without --addr, ls finds the simulator the exported URL names.
	ls := exec.Command(tetherBin, "demo", "daytona", "ls")
	ls.Env = append(os.Environ(), "DAYTONA_API_URL="+d.url)
	if out, err := ls.Output(); err != nil || !strings.Contains(string(out), "3 sandboxes, 0 never deleted") {
		t.Errorf("ls with DAYTONA_API_URL=%s and no --addr: %v\n%s", d.url, err, out)
	}
}

// TestDemoDaytonaUsage: -h is help on stdout with exit 0, naming every
// fault; a bad fault, a bad minute and a busy address are usage errors;
// ls with nothing listening says how to start one.
func TestDemoDaytonaUsage(t *testing.T) {
	out, err := exec.Command(tetherBin, "demo", "daytona", "-h").Output()
	if err != nil {
		t.Fatalf("-h: %v", err)
	}
	for _, want := range []string{"--faults", "--minute", "--addr", "create-lost=", "destroy-lag=", "routes=", "tether demo daytona ls"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("-h does not mention %s:\n%s", want, out)
		}
	}
	d := startLocalDaytona(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--faults", "nosuch=1"}, "unknown key"},
		{[]string{"--minute", "-1s"}, "--minute"},
		{[]string{"--addr", d.addr}, "--addr " + d.addr},
		{[]string{"ls", "--addr", "127.0.0.1:1"}, "no simulated Daytona at 127.0.0.1:1"},
	} {
		cmd := exec.Command(tetherBin, append([]string{"demo", "daytona"}, tc.args...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitCodeUsage || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: %v, stderr %q; want exit %d naming %q", tc.args, err, stderr.String(), exitCodeUsage, tc.want)
		}
	}
}
