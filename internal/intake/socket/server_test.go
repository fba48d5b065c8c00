package socket

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/intentapi"
	"github.com/tether-run/tether/intentapi/client"
	"github.com/tether-run/tether/internal/testutil"

	"github.com/tether-run/tether/internal/intake"
	"github.com/tether-run/tether/journal"
	"go.uber.org/goleak"
)

// Helper-process modes of the test binary (see TestMain).
const (
	envPeerGet = "TETHER_TEST_PEER_GET" // GET /v1/health on this socket, print the status
	envServe   = "TETHER_TEST_SERVE"    // journal path + "|" + socket path: serve until killed
)

func TestMain(m *testing.M) {
	if sock := os.Getenv(envPeerGet); sock != "" {
		_, err := client.New(sock).Health(context.Background())
		var e *client.Error
		switch {
		case err == nil:
			fmt.Println(200)
		case errors.As(err, &e):
			fmt.Println(e.Status)
		default:
			fmt.Println("error:", err)
		}
		os.Exit(0)
	}
	if v := os.Getenv(envServe); v != "" {
		journalPath, sock, _ := strings.Cut(v, "|")
		os.Exit(serveForever(journalPath, sock))
	}
	goleak.VerifyTestMain(m)
}

// serveForever is the process under test of the crash test: it serves the
// socket on a real journal until it is SIGKILLed.
func serveForever(journalPath, sock string) int {
	j, err := journal.Open(journalPath, journal.Options{})
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	s := &Server{Intake: &intake.Intake{Journal: j}, Version: "test"}
	l, err := s.Listen(sock)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("ready")
	if err := s.Serve(l); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	return 0
}

// shortDir returns a fresh directory with a path short enough for a Unix
// socket (t.TempDir paths with long test names are not).
func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "tapi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

type fixture struct {
	srv    *Server
	j      *journal.Journal
	sock   string
	client *client.Client
	http   *http.Client // for requests the client does not make
}

// unixHTTP is a plain HTTP client of the socket at sock.
func unixHTTP(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return new(net.Dialer).DialContext(ctx, "unix", sock)
	}}}
}

// start serves s (Journal filled in if nil) on a real socket.
func start(t *testing.T, s *Server) *fixture {
	t.Helper()
	dir := shortDir(t)
	if s.Intake == nil {
		s.Intake = &intake.Intake{}
	}
	if s.Journal == nil {
		j, err := journal.Open(filepath.Join(dir, "journal.db"), journal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { j.Close() })
		s.Journal = j
	}
	sock := filepath.Join(dir, "run", "tether.sock")
	l, err := s.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	exec, interrupt := s.Actor(l)
	done := make(chan error, 1)
	go func() { done <- exec() }()
	t.Cleanup(func() {
		interrupt(nil)
		if err := testutil.Receive(t, "done", done); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &fixture{srv: s, j: s.Journal.(*journal.Journal), sock: sock, client: client.New(sock), http: unixHTTP(sock)}
}

// raw sends one request over the socket and returns status and body.
func (f *fixture) raw(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, "http://tether"+path, rd)
	resp, err := f.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q", method, path, ct)
	}
	return resp.StatusCode, string(b)
}

func TestEndpoints(t *testing.T) {
	var observedCalls atomic.Int32
	observed := make(chan intent.Intent, 4)
	f := start(t, &Server{Version: "v9", Intake: &intake.Intake{Labels: map[string]string{"scope": "ci", "team": "default"}, Provider: "daytona",
		Observed: func(in intent.Intent) { observedCalls.Add(1); observed <- in }, Accounts: map[string]string{"daytona": "acct"}}})
	ctx := t.Context()

	h, err := f.client.Health(ctx)
	if err != nil || h.Owner != f.j.Owner() || h.Version != "v9" || h.Live != 0 {
		t.Fatalf("health: %+v %v", h, err)
	}
	in, err := f.client.CreateIntent(ctx, intentapi.CreateRequest{Labels: map[string]string{"team": "a"}, OnDrain: intent.DrainStop})
	if err != nil {
		t.Fatal(err)
	}
	if in.State != intent.Pending || in.Name != "tether-"+in.ID || in.OnDrain != intent.DrainStop ||
		in.Provider != "daytona" {
		t.Fatalf("created %+v", in)
	}
	// The account is journaled for the reaper, not part of the wire contract.
	if got, _ := f.j.Get(in.ID); got.Account != "acct" {
		t.Fatalf("journaled account %q", got.Account)
	}
	if _, body := f.raw(t, "GET", "/v1/intents/"+in.ID, ""); strings.Contains(body, `"account"`) || strings.Contains(body, `"outcome"`) {
		t.Fatalf("undocumented fields on the wire: %s", body)
	}
	if in.Labels["scope"] != "ci" || in.Labels["team"] != "a" || in.Labels[intent.LabelOwner] != f.j.Owner() || in.Labels[intent.LabelIntent] != in.ID {
		t.Fatalf("labels %v", in.Labels)
	}
	// The answer came after the commit: the journal has it.
	if got, err := f.j.Get(in.ID); err != nil || got.ID != in.ID {
		t.Fatalf("not in journal: %v", err)
	}
	if got, err := f.client.Get(ctx, in.ID); err != nil || got.ID != in.ID {
		t.Fatalf("get: %+v %v", got, err)
	}
	obs, err := f.client.Observe(ctx, in.ID, "sb-1")
	if err != nil || obs.State != intent.Observed || obs.SandboxID != "sb-1" {
		t.Fatalf("observe: %+v %v", obs, err)
	}
	select {
	case o := <-observed:
		if o.SandboxID != "sb-1" {
			t.Fatalf("Observed got %+v", o)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Observed was not called")
	}
	if _, err := f.client.Observe(ctx, in.ID, "sb-1"); err != nil {
		t.Fatalf("repeat observe: %v", err)
	}
	if _, err := f.client.Observe(ctx, in.ID, "sb-2"); !client.IsStatus(err, http.StatusConflict) {
		t.Fatalf("observe other id: %v", err)
	}
	list, err := f.client.List(ctx)
	if err != nil || len(list) != 1 || list[0].ID != in.ID {
		t.Fatalf("list: %+v %v", list, err)
	}
	if h, _ := f.client.Health(ctx); h.Live != 1 {
		t.Fatalf("health live %d", h.Live)
	}
	rel, err := f.client.Release(ctx, in.ID, "kept")
	if err != nil || rel.State != intent.Released {
		t.Fatalf("release: %+v %v", rel, err)
	}
	if got, _ := f.j.Get(in.ID); got.Outcome != "kept" {
		t.Fatalf("journaled outcome %q", got.Outcome)
	}
	if list, _ := f.client.List(ctx); len(list) != 0 {
		t.Fatalf("released intent still listed: %+v", list)
	}
	if n := observedCalls.Load(); n != 1 {
		t.Fatalf("Observed called %d times, want once", n)
	}
	// A terminal intent's delete answers at once with it.
	if d, err := f.client.Delete(ctx, in.ID); err != nil || d.State != intent.Released {
		t.Fatalf("delete released: %+v %v", d, err)
	}
	if _, err := f.client.Get(ctx, "01arz3ndektsv4rrffq69g5fav"); !client.IsStatus(err, http.StatusNotFound) {
		t.Fatalf("get unknown: %v", err)
	}
}

func TestDelete(t *testing.T) {
	var mode atomic.Value
	var j *journal.Journal
	del := func(ctx context.Context, id string) (intent.Intent, error) {
		if _, err := j.Transition(id, intent.Releasing, ""); err != nil {
			return intent.Intent{}, err
		}
		switch mode.Load() {
		case "gone":
			return j.Transition(id, intent.Gone, "")
		case "fail":
			in, _ := j.Note(id, "503 from provider")
			return in, errors.New("provider unavailable")
		default: // hang until the deadline
			<-ctx.Done()
			in, _ := j.Get(id)
			return in, ctx.Err()
		}
	}
	f := start(t, &Server{Intake: &intake.Intake{Delete: del}, DeleteTimeout: 200 * time.Millisecond})
	j = f.j
	ctx := t.Context()
	for _, tc := range []struct {
		mode   string
		status int
		state  intent.State
	}{
		{"gone", http.StatusOK, intent.Gone},
		{"fail", http.StatusBadGateway, intent.Releasing},
		{"hang", http.StatusGatewayTimeout, intent.Releasing},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			mode.Store(tc.mode)
			in, _ := f.client.CreateIntent(ctx, intentapi.CreateRequest{})
			out, err := f.client.Delete(ctx, in.ID)
			var e *client.Error
			switch {
			case tc.status == http.StatusOK:
				if err != nil || out.State != tc.state {
					t.Fatalf("%+v %v", out, err)
				}
			case !errors.As(err, &e) || e.Status != tc.status:
				t.Fatalf("got %v, want %d", err, tc.status)
			case e.Intent == nil || e.Intent.State != tc.state || e.Intent.ID != in.ID:
				t.Fatalf("answer lacks the live intent: %+v", e.Intent)
			}
		})
	}
	noProvider := start(t, &Server{})
	in, _ := noProvider.client.CreateIntent(ctx, intentapi.CreateRequest{})
	if _, err := noProvider.client.Delete(ctx, in.ID); !client.IsStatus(err, http.StatusNotImplemented) {
		t.Fatalf("no Delete: %v", err)
	}
}

func TestRequestErrors(t *testing.T) {
	f := start(t, &Server{})
	in, _ := f.client.CreateIntent(t.Context(), intentapi.CreateRequest{})
	if _, err := f.client.Observe(t.Context(), in.ID, "sb"); err != nil {
		t.Fatal(err)
	}
	released, _ := f.client.CreateIntent(t.Context(), intentapi.CreateRequest{})
	f.client.Release(t.Context(), released.ID, "")
	unknown := "01arz3ndektsv4rrffq69g5fav"
	long := strings.Repeat("x", intentapi.MaxBody+1)
	manyLabels := make([]string, intent.MaxLabels+1)
	for i := range manyLabels {
		manyLabels[i] = fmt.Sprintf(`"k%d":"v"`, i)
	}
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		says                     string
	}{
		{"malformed json", "POST", "/v1/intents", `{"labels":`, 400, "malformed JSON"},
		// {} is the all-defaults request; no body at all is a body lost.
		{"create empty body", "POST", "/v1/intents", "", 400, "body: empty, want a JSON object ({} for all defaults)"},
		{"create blank body", "POST", "/v1/intents", " \n", 400, "body: empty"},
		{"bad chosen id", "POST", "/v1/intents", `{"id":"Job.7"}`, 400, "not an intent id"},
		{"not an object", "POST", "/v1/intents", `[1]`, 400, "JSON object"},
		{"unknown field", "POST", "/v1/intents", `{"lables":{}}`, 400, `unknown field "lables"`},
		{"two values", "POST", "/v1/intents", `{} {}`, 400, "more than one"},
		{"labels wrong type", "POST", "/v1/intents", `{"labels":["a"]}`, 400, "labels"},
		{"label value wrong type", "POST", "/v1/intents", `{"labels":{"a":1}}`, 400, "labels"},
		{"empty label key", "POST", "/v1/intents", `{"labels":{"":"x"}}`, 400, "empty key"},
		{"reserved label", "POST", "/v1/intents", `{"labels":{"tether-owner":"x"}}`, 400, `labels["tether-owner"]`},
		{"reserved label in another case", "POST", "/v1/intents", `{"labels":{"Tether-owner":"x"}}`, 400, `labels["Tether-owner"]`},
		{"reserved label upper case", "POST", "/v1/intents", `{"labels":{"TETHER-INTENT":"x"}}`, 400, `labels["TETHER-INTENT"]`},
		{"field in upper case", "POST", "/v1/intents", `{"LABELS":{"a":"b"}}`, 400, `unknown field "LABELS"`},
		{"field in title case", "POST", "/v1/intents", `{"Key":"k"}`, 400, `unknown field "Key"`},
		{"field in two cases", "POST", "/v1/intents", `{"labels":{"a":"b"},"Labels":{"c":"d"}}`, 400, `unknown field "Labels"`},
		{"duplicate field", "POST", "/v1/intents", `{"key":"a","key":"b"}`, 400, "key: the field is given twice"},
		{"duplicate label", "POST", "/v1/intents", `{"labels":{"a":"1","a":"2"}}`, 400, `labels["a"]: the key is given twice`},
		{"invalid UTF-8 label value", "POST", "/v1/intents", "{\"labels\":{\"a\":\"\xff\xfe\"}}", 400, `labels["a"]: not valid UTF-8`},
		{"unpaired surrogate", "POST", "/v1/intents", `{"labels":{"a":"\udc00"}}`, 400, `labels["a"]`},
		{"observe field in another case", "POST", "/v1/intents/" + in.ID + "/observe", `{"Sandbox_ID":"s"}`, 400, `unknown field "Sandbox_ID"`},
		{"release duplicate", "POST", "/v1/intents/" + in.ID + "/release", `{"outcome":"kept","outcome":"deleted"}`, 400, "outcome: the field is given twice"},
		{"long label key", "POST", "/v1/intents", `{"labels":{"` + strings.Repeat("k", 64) + `":"x"}}`, 400, "key is 64 bytes"},
		{"long label value", "POST", "/v1/intents", `{"labels":{"k":"` + strings.Repeat("v", 256) + `"}}`, 400, `labels["k"]`},
		{"too many labels", "POST", "/v1/intents", `{"labels":{` + strings.Join(manyLabels, ",") + `}}`, 400, "at most 64"},
		{"bad on_drain", "POST", "/v1/intents", `{"on_drain":"nuke"}`, 400, "on_drain"},
		{"bad key", "POST", "/v1/intents", `{"key":"a b"}`, 400, "key"},
		{"too large", "POST", "/v1/intents", `{"key":"` + long + `"}`, 413, "larger than"},
		{"bad id get", "GET", "/v1/intents/NOT-AN-ID", "", 400, "not an intent id"},
		{"bad id observe", "POST", "/v1/intents/X.y/observe", `{"sandbox_id":"s"}`, 400, "not an intent id"},
		{"bad id release", "POST", "/v1/intents/X.y/release", `{}`, 400, "not an intent id"},
		{"bad id delete", "DELETE", "/v1/intents/X.y", "", 400, "not an intent id"},
		{"unknown get", "GET", "/v1/intents/" + unknown, "", 404, "not found"},
		{"unknown observe", "POST", "/v1/intents/" + unknown + "/observe", `{"sandbox_id":"s"}`, 404, "not found"},
		{"unknown release", "POST", "/v1/intents/" + unknown + "/release", `{}`, 404, "not found"},
		{"unknown delete", "DELETE", "/v1/intents/" + unknown, "", 404, "not found"},
		{"observe empty body", "POST", "/v1/intents/" + in.ID + "/observe", "", 400, "empty"},
		{"observe no id", "POST", "/v1/intents/" + in.ID + "/observe", `{}`, 400, "sandbox_id"},
		{"observe bad sandbox id", "POST", "/v1/intents/" + in.ID + "/observe", `{"sandbox_id":"a/b"}`, 400, "sandbox_id"},
		{"observe other id", "POST", "/v1/intents/" + in.ID + "/observe", `{"sandbox_id":"other"}`, 409, "already observed"},
		{"observe released", "POST", "/v1/intents/" + released.ID + "/observe", `{"sandbox_id":"s"}`, 409, "released"},
		{"bad outcome", "POST", "/v1/intents/" + in.ID + "/release", `{"outcome":"lost"}`, 400, "outcome"},
		{"release unknown field", "POST", "/v1/intents/" + in.ID + "/release", `{"outcome":"kept","x":1}`, 400, "unknown field"},
		{"unknown endpoint", "GET", "/v2/nothing", "", 404, "no such endpoint"},
		{"wrong method", "PUT", "/v1/intents", "{}", 405, "not allowed"},
		{"wrong method health", "POST", "/v1/health", "", 405, "not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := f.raw(t, tc.method, tc.path, tc.body)
			var eb intentapi.ErrorBody
			if err := json.Unmarshal([]byte(body), &eb); err != nil {
				t.Fatalf("answer is not a JSON error: %s", body)
			}
			if code != tc.status || !strings.Contains(eb.Error, tc.says) {
				t.Fatalf("%s %s: %d %s; want %d saying %q", tc.method, tc.path, code, body, tc.status, tc.says)
			}
		})
	}
	// Nothing invalid reached the journal: only the two intents above exist.
	all, _ := f.j.All()
	if len(all) != 2 {
		t.Fatalf("journal holds %d intents, want 2", len(all))
	}
	if got, _ := f.j.Get(in.ID); got.SandboxID != "sb" || got.State != intent.Observed {
		t.Fatalf("refused requests changed the intent: %+v", got)
	}
}

// TestChosenID: a client may choose the intent id, as a spool file's writer
// does (`tether intent new --key K` sends the key as the id): the name is
// tether-<id>, the id is the handle, the same id again returns the live
// intent, and an ended one's id is refused.
func TestChosenID(t *testing.T) {
	f := start(t, &Server{})
	code, body := f.raw(t, "POST", "/v1/intents", `{"id":"job-7","labels":{"step":"build"}}`)
	var in intentapi.Intent
	if err := json.Unmarshal([]byte(body), &in); err != nil || code != http.StatusCreated {
		t.Fatalf("create with an id: %d %s", code, body)
	}
	if in.ID != "job-7" || in.Name != "tether-job-7" || in.Labels[intent.LabelIntent] != "job-7" {
		t.Fatalf("create with an id: %+v", in)
	}
	if code, body := f.raw(t, "POST", "/v1/intents", `{"id":"job-7"}`); code != http.StatusCreated || !strings.Contains(body, `"id":"job-7"`) {
		t.Fatalf("the same id again: %d %s", code, body)
	}
	if code, body := f.raw(t, "POST", "/v1/intents/job-7/release", `{}`); code != http.StatusOK {
		t.Fatalf("release by the chosen id: %d %s", code, body)
	}
	if code, body := f.raw(t, "POST", "/v1/intents", `{"id":"job-7"}`); code != http.StatusConflict || !strings.Contains(body, "already in use") {
		t.Fatalf("the id of an ended intent: %d %s; want 409", code, body)
	}
	if all, _ := f.j.All(); len(all) != 1 {
		t.Fatalf("journal holds %d intents, want 1", len(all))
	}
}

func TestIdempotentRetry(t *testing.T) {
	f := start(t, &Server{})
	first, err := f.client.CreateIntent(t.Context(), intentapi.CreateRequest{Key: "job-42", Labels: map[string]string{"a": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	code, body := f.raw(t, "POST", "/v1/intents", `{"key":"job-42"}`)
	if code != http.StatusCreated || !strings.Contains(body, first.ID) {
		t.Fatalf("retry: %d %s", code, body)
	}
	if all, _ := f.j.All(); len(all) != 1 {
		t.Fatalf("retry created another intent: %d", len(all))
	}
}

func TestConcurrentCreates(t *testing.T) {
	f := start(t, &Server{})
	const clients, each = 64, 10
	var wg sync.WaitGroup
	var mu sync.Mutex
	ids := map[string]bool{}
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				in, err := f.client.CreateIntent(t.Context(), intentapi.CreateRequest{Key: fmt.Sprintf("c%d-%d", c, i)})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				ids[in.ID] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	live, _ := f.j.Live()
	if len(ids) != clients*each || len(live) != clients*each {
		t.Fatalf("%d acknowledged, %d live; want %d", len(ids), len(live), clients*each)
	}
	for _, in := range live {
		if !ids[in.ID] {
			t.Fatalf("unacknowledged intent %s", in.ID)
		}
	}
}

func TestListen(t *testing.T) {
	dir := shortDir(t)
	sock := filepath.Join(dir, "s", "tether.sock")
	s := &Server{}
	l, err := s.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(sock)
	di, _ := os.Stat(filepath.Dir(sock))
	if fi.Mode().Perm() != 0o600 || di.Mode().Perm() != 0o700 {
		t.Fatalf("socket %s, dir %s; want 0600, 0700", fi.Mode().Perm(), di.Mode().Perm())
	}
	// A live socket is not taken over.
	if _, err := (&Server{}).Listen(sock); err == nil || !strings.Contains(err.Error(), "another process") {
		t.Fatalf("second listener on a live socket: %v", err)
	}
	// A socket left by a dead process is replaced.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	l2, err := (&Server{}).Listen(sock)
	if err != nil {
		t.Fatalf("stale socket: %v", err)
	}
	l2.Close()
	// A regular file in the way is reported, not removed.
	file := filepath.Join(dir, "s", "file.sock")
	os.WriteFile(file, []byte("data"), 0o600)
	if _, err := (&Server{}).Listen(file); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("file in the way: %v", err)
	}
	if b, _ := os.ReadFile(file); string(b) != "data" {
		t.Fatal("the file was touched")
	}
	// A directory others may write is refused.
	open := filepath.Join(dir, "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	if _, err := (&Server{}).Listen(filepath.Join(open, "t.sock")); err == nil || !strings.Contains(err.Error(), "lets others") {
		t.Fatalf("world-writable dir: %v", err)
	}
}

// TestPeerCredentials connects from another uid (nobody, via setpriv) and
// expects 403, then 200 once that uid is allowed.
func TestPeerCredentials(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a helper as another uid")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv not installed")
	}
	// The helper binary and the socket must be reachable by nobody: a
	// directory tree the test opens up on purpose.
	dir := shortDir(t)
	os.Chmod(dir, 0o755)
	self, _ := os.Executable()
	bin := filepath.Join(dir, "helper")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	asNobody := func(sock string) string {
		cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", bin, "-test.run=^$")
		cmd.Env = append(os.Environ(), envPeerGet+"="+sock)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helper: %v: %s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	for _, tc := range []struct {
		name  string
		allow []int
		want  string
	}{
		{"refused", nil, "403"},
		{"allowed", []int{65534}, "200"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j, err := journal.Open(filepath.Join(shortDir(t), "j.db"), journal.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			s := &Server{Intake: &intake.Intake{Journal: j}, AllowUIDs: tc.allow}
			sockDir := filepath.Join(dir, tc.name)
			os.Mkdir(sockDir, 0o755)
			sock := filepath.Join(sockDir, "t.sock")
			l, err := s.Listen(sock)
			if err != nil {
				t.Fatal(err)
			}
			// Only the kernel's peer check stands between nobody and the
			// API: open the socket file itself up too.
			os.Chmod(sock, 0o666)
			go s.Serve(l)
			defer s.Close()
			if got := asNobody(sock); got != tc.want {
				t.Fatalf("as nobody: %s, want %s", got, tc.want)
			}
			// Our own uid is always let in.
			if _, err := client.New(sock).Health(t.Context()); err != nil {
				t.Fatalf("own uid: %v", err)
			}
		})
	}
}
