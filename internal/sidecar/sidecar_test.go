package sidecar

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiclient "github.com/daytonaio/daytona/libs/api-client-go"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/config"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/daytona"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
	"github.com/tether-run/tether/supervisor"
)

// The lifecycle of `tether run` in process: a real child process (this test
// binary again, or /bin/sh), a real journal, socket and proxy, and the
// simulated Daytona behind the real provider. Each test judges by the
// simulator's record.

// Child modes: the test binary, run again as the sidecar's child with
// envChild set, is a runner that declares its sandbox one way and exits.
const (
	envChild = "TETHER_SIDECAR_TEST_CHILD"
	envOut   = "TETHER_SIDECAR_TEST_OUT" // where the child writes its sandbox id
	// childExit is the socket runner's exit code, so a test sees the
	// child's status come through the drain.
	childExit = 3
	// leaseTestMinutes is --lease in the lease test.
	leaseTestMinutes = 2
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(envChild); mode != "" {
		if err := runChild(mode); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		if mode == "socket" {
			os.Exit(childExit)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runChild is the runner: "proxy" creates a sandbox through
// DAYTONA_API_URL as an unchanged runner would (tether's proxy); "socket"
// declares an intent over $TETHER_SOCKET, creates the sandbox with the
// name and labels tether returned, and reports its id (protocol.md's one
// rule). Either way it leaves the sandbox for the drain.
func runChild(mode string) error {
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitBound)
	defer cancel()
	c := apiclient.NewConfiguration()
	c.Servers = apiclient.ServerConfigurations{{URL: os.Getenv(daytona.EnvAPIURL)}}
	c.AddDefaultHeader("Authorization", "Bearer "+os.Getenv("DAYTONA_API_KEY"))
	dt := apiclient.NewAPIClient(c)
	req := apiclient.NewCreateSandbox()
	var declared struct {
		ID     string            `json:"id"`
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	}
	sock := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", os.Getenv(config.EnvSocket))
	}}}
	call := func(path, body string, out any) error {
		r, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://tether"+path, strings.NewReader(body))
		if err != nil {
			return err
		}
		resp, err := sock.Do(r)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("POST %s: %s: %s", path, resp.Status, b)
		}
		if out == nil {
			return nil
		}
		return json.Unmarshal(b, out)
	}
	switch mode {
	case "proxy":
		req.SetName("runner-box")
	case "socket", "kept", "spool-delete":
		if err := call("/v1/intents", `{"labels":{"job":"socket"}}`, &declared); err != nil {
			return err
		}
		req.SetName(declared.Name)
		req.SetLabels(declared.Labels)
	case "spool":
		// The writer chooses the id, so it knows the name and labels.
		declared.ID = "spooled"
		declared.Name = intent.NamePrefix + declared.ID
		declared.Labels = map[string]string{intent.LabelOwner: os.Getenv(config.EnvOwner), intent.LabelIntent: declared.ID}
		for _, kv := range strings.Split(os.Getenv(config.EnvLabels), ",") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				declared.Labels[k] = v
			}
		}
		req.SetName(declared.Name)
		req.SetLabels(declared.Labels)
	default:
		return fmt.Errorf("unknown mode %q", mode)
	}
	sb, _, err := dt.SandboxAPI.CreateSandbox(ctx).CreateSandbox(*req).Execute()
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	if mode == "spool" {
		// Renamed in just before the runner exits: only the spool
		// intake's last scan, which the drain waits for, can take them.
		for i, op := range []string{
			`{"op":"intent","id":"` + declared.ID + `"}`,
			`{"op":"observe","id":"` + declared.ID + `","sandbox_id":"` + sb.GetId() + `"}`,
		} {
			dir := os.Getenv(config.EnvSpool)
			tmp := filepath.Join(dir, fmt.Sprintf(".%d.tmp", i))
			if err := os.WriteFile(tmp, []byte(op), 0o600); err != nil {
				return err
			}
			if err := os.Rename(tmp, filepath.Join(dir, fmt.Sprintf("%d.json", i))); err != nil {
				return err
			}
		}
	} else if mode != "proxy" {
		if err := call("/v1/intents/"+declared.ID+"/observe", `{"sandbox_id":"`+sb.GetId()+`"}`, nil); err != nil {
			return err
		}
	}
	if mode == "spool-delete" {
		// The runner asks for its sandbox's deletion with a spool file and
		// exits once tether has taken the file.
		op := `{"op":"delete","id":"` + declared.ID + `"}`
		dir := os.Getenv(config.EnvSpool)
		if err := os.WriteFile(filepath.Join(dir, ".d.tmp"), []byte(op), 0o600); err != nil {
			return err
		}
		if err := os.Rename(filepath.Join(dir, ".d.tmp"), filepath.Join(dir, "d.json")); err != nil {
			return err
		}
		// Its disappearance is tether's acknowledgement.
		for {
			if _, err := os.Stat(filepath.Join(dir, "d.json")); errors.Is(err, os.ErrNotExist) {
				break
			}
			select {
			case <-ctx.Done():
				return errors.New("the spool file was never taken")
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	if mode == "kept" {
		// Once lease mode has put the sandbox under its lease (the
		// lease's minutes as its auto-stop), keep it and exit at once.
		for {
			got, _, err := dt.SandboxAPI.GetSandbox(ctx, sb.GetId()).Execute()
			if err != nil {
				return fmt.Errorf("read: %w", err)
			}
			if got.GetAutoStopInterval() == leaseTestMinutes {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("no lease on %s: auto-stop %v", sb.GetId(), got.GetAutoStopInterval())
			case <-time.After(10 * time.Millisecond):
			}
		}
		if err := call("/v1/intents/"+declared.ID+"/release", `{"outcome":"kept"}`, nil); err != nil {
			return err
		}
	}
	return os.WriteFile(os.Getenv(envOut), []byte(sb.GetId()), 0o600)
}

// world is one simulated Daytona, the environment the real provider reads
// it from, and a sidecar's paths in a short directory (a Unix socket's path
// is limited to about 100 bytes).
type world struct {
	t   *testing.T
	srv *daytonatest.Server
	dir string
	cfg config.Config
	log testutil.Buffer // tether's logs and the drain's report
}

func newWorld(t *testing.T, opts ...daytonatest.Option) *world {
	t.Helper()
	srv, _ := testutil.Daytona(t, opts...)
	t.Setenv(daytona.EnvAPIURL, srv.URL)
	t.Setenv(daytona.EnvServerURL, "")
	t.Setenv("DAYTONA_API_KEY", daytonatest.DefaultKey)
	dir, err := os.MkdirTemp("", "sc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg := config.Default()
	cfg.Journal = filepath.Join(dir, "journal.db")
	cfg.Socket = filepath.Join(dir, "s.sock")
	cfg.Spool = filepath.Join(dir, "spool")
	cfg.DrainTimeout = testutil.WaitBound
	cfg.Docker = false // this machine's engine is not the test's
	w := &world{t: t, srv: srv, dir: dir, cfg: cfg}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("tether's log:\n%s", w.log.String())
		}
	})
	return w
}

// open is Open and Listen, with Close at cleanup; before runs between
// them (a test's hook into the intakes, which Listen copies).
func (w *world) open(before ...func(*Sidecar)) *Sidecar {
	w.t.Helper()
	log := slog.New(slog.NewTextHandler(&w.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	sc, err := Open(w.cfg, Options{Logger: log, Version: "test", Report: &w.log})
	if err != nil {
		w.t.Fatalf("Open: %v", err)
	}
	w.t.Cleanup(func() { sc.Close() })
	for _, f := range before {
		f(sc)
	}
	if err := sc.Listen(); err != nil {
		w.t.Fatalf("Listen: %v", err)
	}
	return sc
}

// runChild runs this test binary as the sidecar's child in mode, and
// returns its status and the sandbox id it created.
func (w *world) runChild(sc *Sidecar, mode string) (supervisor.Status, string) {
	w.t.Helper()
	out := filepath.Join(w.dir, "child.out")
	w.t.Setenv(envChild, mode)
	w.t.Setenv(envOut, out)
	st, err := w.run(sc, os.Args[0], "-test.run=^$")
	if err != nil {
		w.t.Fatalf("Run: %v", err)
	}
	id, err := os.ReadFile(out)
	if err != nil {
		w.t.Fatalf("the child created no sandbox (status %+v): %v", st, err)
	}
	return st, string(id)
}

// run is sc.Run, bounded: a drain that hung would otherwise hold the test
// until go test's own timeout.
func (w *world) run(sc *Sidecar, command ...string) (supervisor.Status, error) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*testutil.WaitBound+w.cfg.DrainTimeout)
	defer cancel()
	type result struct {
		st  supervisor.Status
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := sc.Run(ctx, command, nil)
		done <- result{st, err}
	}()
	select {
	case r := <-done:
		return r.st, r.err
	case <-time.After(3*testutil.WaitBound + w.cfg.DrainTimeout):
		w.t.Fatalf("Run did not return")
		return supervisor.Status{}, nil
	}
}

// deleted says whether the simulator holds sandbox id as deleted.
func (w *world) deleted(id string) (bool, string) {
	sb, ok := w.srv.Sandbox(id)
	if !ok {
		return false, "no such sandbox in the simulator"
	}
	return sb.DeleteRequested && sb.State == "destroyed", fmt.Sprintf("state %s, delete requested %v", sb.State, sb.DeleteRequested)
}

// A runner that creates its sandbox through the proxy, unchanged, and
// exits: the sandbox is deleted and confirmed gone before Run returns.
func TestRunDrainsWhatTheProxyDeclared(t *testing.T) {
	w := newWorld(t)
	sc := w.open()
	st, id := w.runChild(sc, "proxy")
	if st.Code != 0 {
		t.Fatalf("child exit %d, want 0", st.Code)
	}
	if ok, why := w.deleted(id); !ok {
		t.Fatalf("sandbox %s after the drain: %s", id, why)
	}
	if n := sc.Unresolved(); n != 0 {
		t.Errorf("Unresolved = %d, want 0", n)
	}
	all, err := sc.Journal().All()
	if err != nil || len(all) != 1 || all[0].SandboxID != id || all[0].State != intent.Gone {
		t.Fatalf("journal: %+v, %v; want one intent on %s, gone", all, err, id)
	}
	if sb, _ := w.srv.Sandbox(id); sb.Labels[intent.LabelOwner] != sc.Journal().Owner() {
		t.Errorf("sandbox labels %v: the proxy did not put tether's owner on it", sb.Labels)
	}
}

// A runner that declares over the socket and exits with its own code: the
// code is the child's, and the sandbox is drained.
func TestRunDrainsWhatTheSocketDeclared(t *testing.T) {
	w := newWorld(t)
	w.cfg.DaytonaProxy = false // the runner calls Daytona itself
	w.cfg.Labels = map[string]string{"team": "infra"}
	w.cfg.MetricsAddr = "127.0.0.1:0"
	sc := w.open()
	st, id := w.runChild(sc, "socket")
	w.declaredThrough(sc, "socket")
	if st.Code != childExit {
		t.Fatalf("child exit %d, want %d", st.Code, childExit)
	}
	if ok, why := w.deleted(id); !ok {
		t.Fatalf("sandbox %s after the drain: %s", id, why)
	}
	sb, _ := w.srv.Sandbox(id)
	if sb.Labels["team"] != "infra" || sb.Labels["job"] != "socket" {
		t.Errorf("sandbox labels %v: want the scope label and the runner's", sb.Labels)
	}
}

// A runner that declares with spool files renamed in just before it
// exits: the drain waits for the spool intake's last scan, so the intent
// is journaled and its sandbox drained.
func TestRunDrainsWhatTheSpoolDeclaredLast(t *testing.T) {
	w := newWorld(t)
	w.cfg.DaytonaProxy = false
	w.cfg.Labels = map[string]string{"team": "infra"}
	w.cfg.MetricsAddr = "127.0.0.1:0"
	sc := w.open()
	st, id := w.runChild(sc, "spool")
	w.declaredThrough(sc, "spool")
	if st.Code != 0 {
		t.Fatalf("child exit %d, want 0", st.Code)
	}
	if ok, why := w.deleted(id); !ok {
		t.Fatalf("sandbox %s after the drain: %s", id, why)
	}
	all, err := sc.Journal().All()
	if err != nil || len(all) != 1 || all[0].ID != "spooled" || all[0].State != intent.Gone {
		t.Fatalf("journal: %+v, %v; want the spooled intent gone", all, err)
	}
}

// Lease mode, a runner that keeps its sandbox and exits at once: the drain
// does not delete it, and its lease is ended under the drain's deadline
// (the renewer had no time to see the release), so it gets back the
// backstop's auto-stop and auto-delete never, and outlives tether as the
// runner asked.
func TestRunHandsBackWhatTheRunnerKept(t *testing.T) {
	w := newWorld(t)
	w.cfg.DaytonaProxy = false
	w.cfg.Lease = leaseTestMinutes
	w.cfg.LeaseMinute = 1500 * time.Millisecond
	sc := w.open()
	st, id := w.runChild(sc, "kept")
	if st.Code != 0 {
		t.Fatalf("child exit %d, want 0", st.Code)
	}
	sb, ok := w.srv.Sandbox(id)
	if !ok || sb.DeleteRequested {
		t.Fatalf("sandbox %s the runner kept: found %v, delete requested %v", id, ok, sb.DeleteRequested)
	}
	if sb.AutoStopInterval != w.cfg.DaytonaAutoStop || sb.AutoDeleteInterval != -1 || sb.Labels[provider.LabelKeep] != "true" {
		t.Errorf("sandbox %s the runner kept: auto-stop %d, auto-delete %d, labels %v; want %d, -1 and %s=true (handed back)", id, sb.AutoStopInterval, sb.AutoDeleteInterval, sb.Labels, w.cfg.DaytonaAutoStop, provider.LabelKeep)
	}
	all, err := sc.Journal().All()
	if err != nil || len(all) != 1 || all[0].State != intent.Released || all[0].Outcome != intent.OutcomeKept || all[0].Lease != leaseTestMinutes || !all[0].HandedBack {
		t.Fatalf("journal: %+v, %v; want one intent released as kept under the lease, its hand-back journaled", all, err)
	}
	if n := sc.Unresolved(); n != 0 {
		t.Errorf("Unresolved = %d, want 0", n)
	}
}

// The child's environment is what docs/protocol.md promises: TETHER_SOCKET,
// TETHER_SPOOL, TETHER_OWNER (the journal's owner id), TETHER_LABELS with
// --label, and DAYTONA_API_URL at the proxy on loopback (or, with the proxy
// off, the runner's own).
func TestChildEnv(t *testing.T) {
	for _, proxy := range []bool{true, false} {
		t.Run(fmt.Sprintf("proxy=%v", proxy), func(t *testing.T) {
			w := newWorld(t)
			w.cfg.DaytonaProxy = proxy
			w.cfg.Labels = map[string]string{"team": "infra", "env": "ci"}
			sc := w.open()
			out := filepath.Join(w.dir, "env")
			st, err := w.run(sc, "/bin/sh", "-c", `env > "$0"`, out)
			if err != nil || st.Code != 0 {
				t.Fatalf("Run: %+v, %v", st, err)
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			env := map[string]string{}
			for _, line := range strings.Split(string(b), "\n") {
				if k, v, ok := strings.Cut(line, "="); ok {
					env[k] = v
				}
			}
			want := map[string]string{
				config.EnvSocket: w.cfg.Socket,
				config.EnvSpool:  w.cfg.Spool,
				config.EnvOwner:  sc.Journal().Owner(),
				config.EnvLabels: "env=ci,team=infra",
			}
			for k, v := range want {
				if env[k] != v {
					t.Errorf("%s = %q, want %q", k, env[k], v)
				}
			}
			if sc.Journal().Owner() == "" {
				t.Error("the journal has no owner id")
			}
			url := env[daytona.EnvAPIURL]
			if !proxy {
				if url != w.srv.URL {
					t.Errorf("%s = %q with the proxy off, want the runner's own %q", daytona.EnvAPIURL, url, w.srv.URL)
				}
				return
			}
			if url == w.srv.URL || !strings.HasPrefix(url, "http://127.0.0.1:") {
				t.Errorf("%s = %q, want the proxy on loopback", daytona.EnvAPIURL, url)
			}
		})
	}
}

// The drain ends at --drain-timeout, counted from the moment the child is
// gone, when a sandbox is never confirmed gone, and the intent stays live,
// never reported gone. It keeps trying until its next poll would outlast
// the deadline (reaper's sleep), so it ends within one poll wait before it
// — the deadline is longer than config.DefaultDrainTimeout so that another
// deadline than the one configured is caught — and never later than it by
// more than the slack a loaded machine needs (without a deadline it would
// poll a sandbox destroying for an hour).
func TestDrainDeadline(t *testing.T) {
	w := newWorld(t)
	w.cfg.DrainTimeout = config.DefaultDrainTimeout + 3*time.Second
	sc := w.open()
	// A deleted sandbox stays `destroying` for an hour (Daytona issue #3294).
	w.srv.SetFaults(daytonatest.Faults{Destroying: time.Hour})
	out := filepath.Join(w.dir, "child.out")
	t.Setenv(envChild, "proxy")
	t.Setenv(envOut, out)
	var took time.Duration
	ctx, cancel := context.WithTimeout(context.Background(), 3*testutil.WaitBound)
	defer cancel()
	st, err := supervisor.Run(ctx, supervisor.Config{
		Command: []string{os.Args[0], "-test.run=^$"},
		Env:     sc.ChildEnv(),
		Actors:  sc.actors,
		AfterChild: func(ctx context.Context, st supervisor.Status) error {
			start := time.Now()
			defer func() { took = time.Since(start) }()
			return sc.AfterChild(ctx, st)
		},
	})
	if err != nil || st.Code != 0 {
		t.Fatalf("Run: %+v, %v", st, err)
	}
	id, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if early := w.cfg.DrainTimeout - 2*reaper.DefaultPollMax; took < early {
		t.Errorf("the drain gave up after %s, more than two poll waits before its deadline %s", took, w.cfg.DrainTimeout)
	}
	if slack := testutil.WaitBound / 5; took > w.cfg.DrainTimeout+slack {
		t.Errorf("the drain took %s, past its deadline %s by more than %s", took, w.cfg.DrainTimeout, slack)
	}
	if n := sc.Unresolved(); n != 1 {
		t.Errorf("Unresolved = %d, want 1", n)
	}
	sb, _ := w.srv.Sandbox(string(id))
	if !sb.DeleteRequested || sb.State != "destroying" {
		t.Errorf("sandbox %s: state %s, delete requested %v; want destroying", id, sb.State, sb.DeleteRequested)
	}
	all, err := sc.Journal().All()
	if err != nil || len(all) != 1 || !all[0].State.Live() {
		t.Errorf("journal: %+v, %v; want the intent still live", all, err)
	}
}

// An intake that does not stop when told: the runner's spool file asks for
// its sandbox's deletion and the delete never returns (it ignores its
// context, as a provider call or a journal write on a stalled disk can), so
// the spool intake never finishes. The drain waits for the intakes under
// its deadline, not longer: Run returns while the intake is still held,
// with the child's status, and what the drain reports agrees with the
// simulator's record of the sandbox.
func TestDrainDeadlineCoversAHeldIntake(t *testing.T) {
	w := newWorld(t)
	w.cfg.DaytonaProxy = false
	// The intake is held for as long as the test runs.
	w.cfg.DrainTimeout = 3 * time.Second
	held := make(chan struct{})
	asked := make(chan string, 1)
	sc := w.open(func(sc *Sidecar) {
		sc.intake.Delete = func(_ context.Context, id string) (intent.Intent, error) {
			select {
			case asked <- id:
			default:
			}
			<-held
			return intent.Intent{}, errors.New("held by the test")
		}
	})
	t.Cleanup(func() { close(held) }) // before sc.Close (cleanups run last first)
	out := filepath.Join(w.dir, "child.out")
	t.Setenv(envChild, "spool-delete")
	t.Setenv(envOut, out)
	type result struct {
		st  supervisor.Status
		err error
	}
	done := make(chan result, 1)
	go func() {
		// As tether run's, the parent context never ends: only the drain
		// deadline can end the wait for the intakes.
		st, err := sc.Run(context.Background(), []string{os.Args[0], "-test.run=^$"}, nil)
		done <- result{st, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(w.cfg.DrainTimeout + testutil.WaitBound):
		t.Fatalf("Run has not returned %s past the drain deadline (%s) while the spool intake is held: the wait for the intakes outlasts the deadline", testutil.WaitBound, w.cfg.DrainTimeout)
	}
	if r.err != nil || r.st.Code != 0 {
		t.Fatalf("Run: %+v, %v; want the child's exit 0", r.st, r.err)
	}
	var inID string
	select {
	case inID = <-asked:
	case <-time.After(testutil.WaitBound):
		t.Fatal("the spool intake never asked for the delete: nothing held it, the test proves nothing")
	}
	if !strings.Contains(w.log.String(), "deadline reached while waiting for the spool intake") {
		t.Errorf("no warning that the drain stopped waiting for the spool intake")
	}
	sbID, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	gone, why := w.deleted(string(sbID))
	in, err := sc.Journal().Get(inID)
	if err != nil {
		t.Fatal(err)
	}
	if live := sc.Unresolved(); gone == in.State.Live() || gone != (live == 0) {
		t.Errorf("sandbox %s (%s): intent %s, %d reported unresolved; the report disagrees with the simulator", sbID, why, in.State, live)
	}
}

// `tether drain`'s Drain resolves what a run left live and reports; a
// sandbox never confirmed gone is left live when the deadline ends it.
func TestDrainOffline(t *testing.T) {
	w := newWorld(t)
	j, err := OpenJournal(w.cfg, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	opened := OpenProviders(w.cfg, slog.Default())
	prov, err := opened.Provider(intent.DefaultProvider)
	if err != nil {
		t.Fatal(err)
	}
	in, sbID := w.leftLive(j, prov.Account())
	var out bytes.Buffer
	rep, err := DrainProviders(context.Background(), w.cfg, j, opened, slog.Default(), &out)
	if err != nil || rep.Live() != 0 {
		t.Fatalf("Drain: %d left live, %v\n%s", rep.Live(), err, out.String())
	}
	if ok, why := w.deleted(sbID); !ok {
		t.Fatalf("sandbox %s after Drain: %s", sbID, why)
	}
	if got, _ := j.Get(in.ID); got.State != intent.Gone {
		t.Errorf("intent %s: %s, want gone", in.ID, got.State)
	}
	if !strings.Contains(out.String(), "tether: ") {
		t.Errorf("no report:\n%s", out.String())
	}

	// A sandbox never confirmed gone: the same deadline ends the drain.
	w.leftLive(j, prov.Account())
	w.srv.SetFaults(daytonatest.Faults{Destroying: time.Hour})
	w.cfg.DrainTimeout = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitBound)
	defer cancel()
	start := time.Now()
	rep, err = DrainProviders(ctx, w.cfg, j, opened, slog.Default(), &out)
	took := time.Since(start)
	if !errors.Is(err, reaper.ErrUnresolved) || rep.Live() != 1 {
		t.Fatalf("Drain: %d left live, %v; want 1 and ErrUnresolved", rep.Live(), err)
	}
	if took > w.cfg.DrainTimeout+testutil.WaitBound/5 {
		t.Errorf("Drain took %s with a deadline of %s", took, w.cfg.DrainTimeout)
	}
}

// leftLive is what a dead run left: an intent observed on a sandbox made
// with the intent's name and labels.
func (w *world) leftLive(j *journal.Journal, account string) (intent.Intent, string) {
	w.t.Helper()
	in, _, err := j.Create(context.Background(), intent.Declaration{Provider: daytona.ProviderName, Account: account})
	if err != nil {
		w.t.Fatal(err)
	}
	sb, err := w.srv.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Name: in.Name, Labels: in.Labels})
	if err != nil {
		w.t.Fatal(err)
	}
	if in, err = j.Observe(in.ID, sb.ID); err != nil {
		w.t.Fatal(err)
	}
	return in, sb.ID
}
