package apiproxy

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
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/intake"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/journal"
)

// A refused request's connection is closed by the server, which then
// lingers half a second (net/http's rstAvoidanceDelay) in a goroutine
// that outlives Close by design.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("net/http.(*conn).closeWriteAndWait"))
}

// The shared half is exercised here under an API shaped unlike Daytona's
// (sandboxes with no name, found by metadata; the id in "sandboxID"; a
// kill answered 204), so that what a second provider's proxy needs is
// proven to be here and not in daytonaproxy. The provider half below is
// the few lines such a proxy writes.

// otherAPI is the provider half: its error shape, its answer's id, and
// which refusals create nothing.
type otherAPI struct{}

func (otherAPI) WriteError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]any{"code": code, "message": msg})
}

func (otherAPI) SandboxID(answer []byte) (string, error) {
	var sb struct {
		SandboxID string `json:"sandboxID"`
	}
	if err := json.Unmarshal(answer, &sb); err != nil || sb.SandboxID == "" {
		return "", fmt.Errorf("no sandboxID in the answer")
	}
	return sb.SandboxID, nil
}

func (otherAPI) CreatedNothing(status int) bool { return status == http.StatusTooManyRequests }

// call is one request the stand-in upstream received, and what the
// journal held for its intent at that moment.
type call struct {
	method, path string
	body         map[string]any
	journaled    intent.Intent // the intent named in the body's metadata, as journaled before the call arrived
	journalErr   error
}

// world is a proxy with the provider half above in front of a stand-in
// upstream whose answers each test chooses.
type world struct {
	j      *journal.Journal
	p      *Proxy
	url    string // the child's API URL
	logs   *testutil.Buffer
	mu     sync.Mutex
	calls  []call
	answer func(w http.ResponseWriter, r *http.Request) // the upstream's answer
	// rewriting, if set, is called as a create's body is rewritten: its
	// intent is journaled, nothing is forwarded yet.
	rewriting func(r *http.Request)
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{logs: &testutil.Buffer{}}
	j, err := journal.Open(filepath.Join(t.TempDir(), "journal.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w.j = j
	up := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		c := call{method: r.Method, path: r.URL.Path}
		b, _ := io.ReadAll(r.Body)
		json.Unmarshal(b, &c.body)
		if md, ok := c.body["metadata"].(map[string]any); ok {
			id, _ := md[intent.LabelIntent].(string)
			c.journaled, c.journalErr = j.Get(id)
		}
		w.mu.Lock()
		w.calls = append(w.calls, c)
		answer := w.answer
		w.mu.Unlock()
		answer(rw, r)
	}))
	var p *Proxy
	p, err = New(Config{
		Intake: &intake.Intake{Journal: j, Provider: "other", Labels: map[string]string{"team": "a"},
			Logger: slog.New(slog.NewTextHandler(w.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))},
		API:  otherAPI{},
		Name: "Other", KeyEnv: "OTHER_API_KEY",
		Upstream: up.URL + "/v1",
		Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			rest, _ := strings.CutPrefix(r.URL.Path, p.Base()+"/sandboxes")
			switch {
			case r.Method == http.MethodPost && rest == "":
				body, ok := p.ReadCreate(rw, r)
				if !ok {
					return
				}
				var fields map[string]any
				if json.Unmarshal(body, &fields) != nil {
					otherAPI{}.WriteError(rw, http.StatusBadRequest, "not JSON")
					return
				}
				p.Create(rw, r, Create{Account: r.Header.Get("X-API-Key"), Rewrite: func(in intent.Intent) ([]byte, error) {
					if w.rewriting != nil {
						w.rewriting(r)
					}
					fields["metadata"] = in.Labels
					return json.Marshal(fields)
				}})
			case r.Method == http.MethodDelete && len(rest) > 1:
				p.PassDelete(rw, r, r.Header.Get("X-API-Key"), rest[1:])
			default:
				p.Pass(rw, r)
			}
		}),
		MaxCreateBody: 1 << 10,
	})
	if err != nil {
		t.Fatal(err)
	}
	w.p = p
	l, err := p.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w.url = p.URL(l)
	execute, interrupt := p.Actor(l)
	done := make(chan error, 1)
	go func() { done <- execute() }()
	t.Cleanup(func() {
		interrupt(nil)
		if err := testutil.Receive(t, "done", done); err != nil {
			t.Errorf("Serve: %v", err)
		}
		up.Close()
		p.Transport.(*http.Transport).CloseIdleConnections()
		j.Close()
	})
	return w
}

func (w *world) setAnswer(f func(w http.ResponseWriter, r *http.Request)) {
	w.mu.Lock()
	w.answer = f
	w.mu.Unlock()
}

func (w *world) recorded() []call {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]call(nil), w.calls...)
}

func (w *world) do(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, w.url+path, strings.NewReader(body))
	req.Header.Set("X-API-Key", "acct")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (w *world) onlyIntent(t *testing.T) intent.Intent {
	t.Helper()
	all, err := w.j.All()
	if err != nil || len(all) != 1 {
		t.Fatalf("journal holds %d intents (%v), want 1", len(all), err)
	}
	return all[0]
}

func TestCreateJournalsBeforeForwarding(t *testing.T) {
	w := newWorld(t)
	w.setAnswer(func(rw http.ResponseWriter, r *http.Request) {
		rw.WriteHeader(http.StatusCreated)
		io.WriteString(rw, `{"sandboxID":"sb-1","extra":"kept"}`)
	})
	code, body := w.do(t, "POST", "/sandboxes", `{"templateID":"base"}`)
	if code != http.StatusCreated || body != `{"sandboxID":"sb-1","extra":"kept"}` {
		t.Fatalf("runner got %d %s, want the upstream's answer byte for byte", code, body)
	}
	calls := w.recorded()
	if len(calls) != 1 {
		t.Fatalf("upstream got %d calls", len(calls))
	}
	c := calls[0]
	if c.journalErr != nil || c.journaled.State != intent.Pending || c.journaled.Account != "acct" || c.journaled.Provider != "other" {
		t.Fatalf("when the create reached the upstream its intent was %+v (%v), want pending under the runner's account", c.journaled, c.journalErr)
	}
	if c.body["templateID"] != "base" {
		t.Fatalf("the runner's fields were not forwarded: %v", c.body)
	}
	md, _ := c.body["metadata"].(map[string]any)
	if md["team"] != "a" || md[intent.LabelOwner] != w.j.Owner() {
		t.Fatalf("forwarded metadata %v lacks the scope and owner labels", md)
	}
	testutil.Eventually(t, "the sandbox id journaled", func() (bool, string) {
		in := w.onlyIntent(t)
		return in.State == intent.Observed && in.SandboxID == "sb-1", fmt.Sprintf("%s %q", in.State, in.SandboxID)
	})
}

func TestCreateSurvivesTheRunnerHangingUp(t *testing.T) {
	w := newWorld(t)
	arrived, release := make(chan struct{}), make(chan struct{})
	w.setAnswer(func(rw http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
		rw.WriteHeader(http.StatusCreated)
		io.WriteString(rw, `{"sandboxID":"sb-late"}`)
	})
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", w.url+"/sandboxes", strings.NewReader(`{}`))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	testutil.WaitFor(t, "the create at the upstream", func() bool {
		select {
		case <-arrived:
			return true
		default:
			return false
		}
	})
	cancel()
	if err := testutil.Receive(t, "errc", errc); !errors.Is(err, context.Canceled) {
		t.Fatalf("runner: %v, want its own cancellation", err)
	}
	close(release)
	testutil.Eventually(t, "the id of the create the runner abandoned journaled", func() (bool, string) {
		in := w.onlyIntent(t)
		return in.SandboxID == "sb-late", string(in.State)
	})
}

// A runner that hangs up after its intent is journaled and before its
// create is forwarded: the create is not sent (nobody would hear of the
// sandbox, and an SDK that retries would make a second one), and the
// intent closes at once as never-created.
func TestCreateOfARunnerGoneBeforeTheForwardIsNotSent(t *testing.T) {
	w := newWorld(t)
	w.setAnswer(func(rw http.ResponseWriter, r *http.Request) {
		rw.WriteHeader(http.StatusCreated)
		io.WriteString(rw, `{"sandboxID":"sb-unasked"}`)
	})
	rewriting := make(chan struct{})
	w.rewriting = func(r *http.Request) {
		close(rewriting)
		<-r.Context().Done() // the runner has hung up, and the server noticed
	}
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", w.url+"/sandboxes", strings.NewReader(`{}`))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	testutil.Receive(t, "the create's intent journaled and its body rewritten", rewriting)
	cancel()
	if err := testutil.Receive(t, "errc", errc); !errors.Is(err, context.Canceled) {
		t.Fatalf("runner: %v, want its own cancellation", err)
	}
	testutil.Eventually(t, "the intent settled", func() (bool, string) {
		in := w.onlyIntent(t)
		return in.State != intent.Pending, string(in.State)
	})
	if in := w.onlyIntent(t); in.State != intent.NeverCreated || !strings.Contains(in.LastError, "hung up before its create was forwarded") {
		t.Errorf("intent %s (%q) on %q, want never-created: the runner hung up", in.State, in.LastError, in.SandboxID)
	}
	if calls := w.recorded(); len(calls) != 0 {
		t.Fatalf("the upstream got %d calls, want none: %+v", len(calls), calls)
	}
}

func TestCreateRefusedOrFailed(t *testing.T) {
	for _, tc := range []struct {
		status int
		want   intent.State
	}{
		{http.StatusTooManyRequests, intent.NeverCreated}, // CreatedNothing: closed at once
		{http.StatusInternalServerError, intent.Pending},  // may have landed: left for the drain
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			w := newWorld(t)
			w.setAnswer(func(rw http.ResponseWriter, r *http.Request) {
				rw.WriteHeader(tc.status)
				io.WriteString(rw, `{"code":1}`)
			})
			if code, body := w.do(t, "POST", "/sandboxes", `{}`); code != tc.status || body != `{"code":1}` {
				t.Fatalf("runner got %d %s", code, body)
			}
			if in := w.onlyIntent(t); in.State != tc.want {
				t.Fatalf("intent %s, want %s", in.State, tc.want)
			}
		})
	}
}

func TestCreateUpstreamUnreachable(t *testing.T) {
	w := newWorld(t)
	// An address nothing listens on: the dial fails, nothing was sent.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	w.p.upstream.Host = addr
	// The runner meets a connection error, as without tether: no answer.
	resp, err := http.Post(w.url+"/sandboxes", "application/json", strings.NewReader(`{}`))
	if err == nil {
		resp.Body.Close()
		t.Fatalf("runner got %d, want a connection error", resp.StatusCode)
	}
	if in := w.onlyIntent(t); in.State != intent.NeverCreated {
		t.Fatalf("intent %s, want never-created", in.State)
	}
}

func TestCreateBodyTooLarge(t *testing.T) {
	w := newWorld(t)
	w.setAnswer(func(rw http.ResponseWriter, r *http.Request) { t.Error("forwarded") })
	big := `{"x":"` + strings.Repeat("a", 2<<10) + `"}`
	if code, _ := w.do(t, "POST", "/sandboxes", big); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("runner got %d, want 413", code)
	}
	if all, _ := w.j.All(); len(all) != 0 || len(w.recorded()) != 0 {
		t.Fatalf("journaled %d, forwarded %d; want neither", len(all), len(w.recorded()))
	}
}

func TestDeleteMarksTheIntent(t *testing.T) {
	w := newWorld(t)
	w.setAnswer(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			if strings.HasSuffix(r.URL.Path, "/missing") {
				rw.WriteHeader(http.StatusNotFound)
				return
			}
			rw.WriteHeader(http.StatusNoContent)
			return
		}
		rw.WriteHeader(http.StatusCreated)
		io.WriteString(rw, `{"sandboxID":"sb-1"}`)
	})
	w.do(t, "POST", "/sandboxes", `{}`)
	testutil.Eventually(t, "observed", func() (bool, string) {
		in := w.onlyIntent(t)
		return in.State == intent.Observed, string(in.State)
	})
	if code, _ := w.do(t, "DELETE", "/sandboxes/missing", ""); code != http.StatusNotFound {
		t.Fatalf("delete of another sandbox: %d", code)
	}
	if in := w.onlyIntent(t); in.State != intent.Observed {
		t.Fatalf("a failed delete of another sandbox moved the intent to %s", in.State)
	}
	if code, _ := w.do(t, "DELETE", "/sandboxes/sb-1", ""); code != http.StatusNoContent {
		t.Fatalf("delete: %d", code)
	}
	if in := w.onlyIntent(t); in.State != intent.Releasing {
		t.Fatalf("after the runner's accepted delete the intent is %s, want releasing", in.State)
	}
	// Everything else passes through untouched.
	w.setAnswer(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("X-Upstream", "yes")
		io.Copy(rw, bytes.NewReader([]byte(r.Method+" "+r.URL.RequestURI())))
	})
	if code, body := w.do(t, "PATCH", "/sandboxes/sb-1/timeout?x=1", "{}"); code != http.StatusOK || body != "PATCH /v1/sandboxes/sb-1/timeout?x=1" {
		t.Fatalf("pass-through: %d %s", code, body)
	}
}
