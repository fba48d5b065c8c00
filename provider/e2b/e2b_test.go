package e2b_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/e2b"
	"github.com/tether-run/tether/provider/e2b/e2btest"
	"github.com/tether-run/tether/provider/e2b/internal/spectest"
)

// env is a simulator and a provider on it whose every request and answer
// is checked against the schema, and whose logs and errors are checked
// for the key.
type env struct {
	t    *testing.T
	srv  *e2btest.Server
	p    *e2b.Provider
	logs *testutil.Buffer
	tr   *spectest.Transport
}

func newEnv(t *testing.T, opts ...e2btest.Option) *env {
	t.Helper()
	srv, _ := testutil.E2B(t, opts...)
	e := &env{t: t, srv: srv, logs: &testutil.Buffer{}}
	e.tr = spectest.New(t, srv.URL)
	e.p = e.provider(e2btest.DefaultKey, 5*time.Second, e.tr)
	t.Cleanup(func() {
		e.tr.Check(t)
		if strings.Contains(e.logs.String(), e2btest.DefaultKey) {
			t.Errorf("the key appears in the logs:\n%s", e.logs.String())
		}
	})
	return e
}

func (e *env) provider(key string, timeout time.Duration, rt http.RoundTripper) *e2b.Provider {
	e.t.Helper()
	log := slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return testutil.E2BProvider(e.t, e.srv, func(c *e2b.Config) {
		c.APIKey, c.CallTimeout, c.Logger, c.HTTPClient = key, timeout, log, &http.Client{Transport: rt}
	})
}

func (e *env) create(name string, labels map[string]string) provider.Sandbox {
	e.t.Helper()
	sb, err := e.p.Create(context.Background(), name, labels, e2b.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return sb
}

func (e *env) fate(id string) e2btest.Sandbox {
	e.t.Helper()
	sb, ok := e.srv.Sandbox(id)
	if !ok {
		e.t.Fatalf("no sandbox %s in the simulator's record", id)
	}
	return sb
}

func noKey(t *testing.T, err error) {
	t.Helper()
	if err != nil && strings.Contains(err.Error(), e2btest.DefaultKey) {
		t.Errorf("the key appears in an error: %v", err)
	}
}

var ctx = context.Background()

func TestConfigFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name              string
		key, domain, url  string
		debug             string
		wantURL, wantFail string
	}{
		{name: "default", key: "e2b_k", wantURL: "https://api.e2b.app"},
		{name: "domain", key: "e2b_k", domain: "example.dev", wantURL: "https://api.example.dev"},
		{name: "url wins", key: "e2b_k", domain: "example.dev", url: "https://e2b.internal:8443", wantURL: "https://e2b.internal:8443"},
		{name: "debug", key: "e2b_k", debug: "TRUE", wantURL: "http://localhost:3000"},
		{name: "url over debug", key: "e2b_k", debug: "true", url: "http://x:1", wantURL: "http://x:1"},
		{name: "no key", wantFail: "E2B_API_KEY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(e2b.EnvAPIKey, tc.key)
			t.Setenv(e2b.EnvDomain, tc.domain)
			t.Setenv(e2b.EnvAPIURL, tc.url)
			t.Setenv(e2b.EnvDebug, tc.debug)
			cfg, err := e2b.ConfigFromEnv()
			if tc.wantFail != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantFail) {
					t.Fatalf("err = %v, want one naming %s", err, tc.wantFail)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			p, err := e2b.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if p.APIURL() != tc.wantURL {
				t.Errorf("API URL %s, want %s", p.APIURL(), tc.wantURL)
			}
			if p.Account() != e2b.Fingerprint(tc.wantURL, tc.key) {
				t.Error("the account is not the fingerprint of the URL and key")
			}
			for _, s := range []string{cfg.String(), cfg.GoString()} {
				if strings.Contains(s, tc.key) {
					t.Errorf("the key appears in %s", s)
				}
			}
		})
	}
}

func TestFingerprint(t *testing.T) {
	a := e2b.Fingerprint("https://api.e2b.app", "e2b_1")
	if a != e2b.Fingerprint("HTTPS://API.E2B.APP/", "e2b_1") {
		t.Error("the fingerprint depends on the URL's case or trailing slash")
	}
	if a == e2b.Fingerprint("https://api.e2b.app", "e2b_2") || a == e2b.Fingerprint("https://api.other.dev", "e2b_1") {
		t.Error("another key or URL has the same fingerprint")
	}
	if !strings.HasPrefix(a, "e2b:") || strings.Contains(a, "e2b_1") {
		t.Errorf("fingerprint %s", a)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	for _, cfg := range []e2b.Config{
		{},
		{APIKey: "e2b_k", APIURL: "ftp://x"},
		{APIKey: "e2b_k", APIURL: "https://x?y=1"},
		{APIKey: "e2b_k", CallTimeout: -1},
	} {
		if _, err := e2b.New(cfg); err == nil {
			t.Errorf("New(%v) accepted", cfg)
		}
	}
}

// The name and labels live in metadata; Get reads them back; Delete is
// 204 and then the sandbox answers 404, in the simulator's record killed
// at our request.
func TestCreateGetDelete(t *testing.T) {
	e := newEnv(t)
	labels := map[string]string{"tether-owner": "o1", "tether-intent": "i1", "scope": "a&b=c+d %"}
	sb := e.create("run-1", labels)
	got, err := e.p.Get(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "run-1" || got.Labels["scope"] != "a&b=c+d %" || got.Labels[e2b.MetadataName] != "run-1" || got.State != provider.StateStarted {
		t.Errorf("Get = %+v", got)
	}
	if got.AutoStopMinutes != 5 {
		t.Errorf("AutoStopMinutes %d, want 5 (the SDKs' 300 s)", got.AutoStopMinutes)
	}
	if f := e.fate(sb.ID); f.EndAt.Sub(f.StartedAt) != e2b.DefaultTimeout {
		t.Errorf("timeout %s, want the SDKs' default", f.EndAt.Sub(f.StartedAt))
	}
	if err := e.p.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.Get(ctx, sb.ID); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Get after delete: %v", err)
	}
	err = e.p.Delete(ctx, sb.ID)
	if !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("second Delete: %v", err)
	}
	noKey(t, err)
	if f := e.fate(sb.ID); f.State != e2btest.StateKilled || f.KillReason != e2btest.KillRequest {
		t.Errorf("fate %+v", f)
	}
}

// A create whose answer was lost is found by its metadata, and deleted.
func TestLostCreateFoundByMetadata(t *testing.T) {
	e := newEnv(t)
	e.srv.SetFaults(e2btest.Faults{RateCreateLost: 1, Routes: []string{e2btest.RouteCreate}})
	_, err := e.p.Create(ctx, "lost-1", map[string]string{"tether-owner": "o1"}, e2b.CreateOptions{})
	if !errors.Is(err, provider.ErrUnavailable) {
		t.Fatalf("lost create: %v", err)
	}
	e.srv.SetFaults(e2btest.Faults{})
	all := e.srv.Sandboxes()
	if len(all) != 1 || !all[0].Lost {
		t.Fatalf("simulator: %+v", all)
	}
	sb, err := e.p.GetByName(ctx, "lost-1")
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID != all[0].ID || sb.Labels["tether-owner"] != "o1" {
		t.Errorf("GetByName = %+v", sb)
	}
	if _, err := e.p.GetByName(ctx, "lost-2"); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("GetByName of another name: %v", err)
	}
	if err := e.p.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if f := e.fate(sb.ID); f.State != e2btest.StateKilled {
		t.Errorf("fate %s", f.State)
	}
}

// While a create is in flight nothing finds it, and a Delete of its id
// (404) leaves it be; once the node answers it is found by its name.
func TestCreateInFlight(t *testing.T) {
	e := newEnv(t)
	e.srv.HoldCreates()
	done := make(chan provider.Sandbox, 1)
	go func() {
		sb, err := e.p.Create(ctx, "slow-1", map[string]string{"tether-owner": "o1"}, e2b.CreateOptions{})
		if err != nil {
			t.Error(err)
		}
		done <- sb
	}()
	var id string
	testutil.WaitFor(t, "the create to be in flight", func() bool {
		for _, sb := range e.srv.Sandboxes() {
			if sb.State == e2btest.StateCreating {
				id = sb.ID
				return true
			}
		}
		return false
	})
	if _, err := e.p.GetByName(ctx, "slow-1"); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("GetByName in flight: %v", err)
	}
	if err := e.p.Delete(ctx, id); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Delete in flight: %v", err)
	}
	e.srv.ReleaseCreates()
	sb := <-done
	if sb.ID != id || e.fate(id).State != e2btest.StateRunning {
		t.Fatalf("created %+v, fate %s", sb, e.fate(id).State)
	}
	if got, err := e.p.GetByName(ctx, "slow-1"); err != nil || got.ID != id {
		t.Errorf("GetByName after: %+v, %v", got, err)
	}
}

// Another team's sandbox, with our very metadata, is invisible and
// untouched: 404 to Get and Delete alike, absent from lists. A provider of
// that team has another account.
func TestOtherTeamUntouched(t *testing.T) {
	e := newEnv(t)
	md := map[string]string{"tether-owner": "o1", e2b.MetadataName: "run-1"}
	theirs := e.srv.AddSandbox("team-2", e2btest.SeedSandbox{Metadata: md, Timeout: time.Hour})
	if _, err := e.p.Get(ctx, theirs.ID); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Get: %v", err)
	}
	if err := e.p.Delete(ctx, theirs.ID); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Delete: %v", err)
	}
	if _, err := e.p.GetByName(ctx, "run-1"); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("GetByName: %v", err)
	}
	if l, err := e.p.List(ctx, map[string]string{"tether-owner": "o1"}); err != nil || len(l) != 0 {
		t.Errorf("List: %v, %v", l, err)
	}
	if f := e.fate(theirs.ID); f.State != e2btest.StateRunning {
		t.Errorf("another team's sandbox is %s", f.State)
	}
	e.srv.AddKey("e2b_team2", "team-2")
	other := e.provider("e2b_team2", time.Second, http.DefaultTransport)
	if other.Account() == e.p.Account() {
		t.Error("two teams' keys share an account")
	}
}

// An id the server would cut ("<id>-<x>" names <id>) or refuse is never
// sent.
func TestMalformedIDNeverSent(t *testing.T) {
	e := newEnv(t)
	sb := e.create("run-1", nil)
	for _, id := range []string{sb.ID + "-x", "", "../v2/sandboxes", strings.ToUpper(sb.ID), sb.ID + "?a=b"} {
		if err := e.p.Delete(ctx, id); !errors.Is(err, provider.ErrNotFound) {
			t.Errorf("Delete(%q) = %v", id, err)
		}
		if _, err := e.p.Get(ctx, id); !errors.Is(err, provider.ErrNotFound) {
			t.Errorf("Get(%q) = %v", id, err)
		}
		if err := e.p.Stop(ctx, id); !errors.Is(err, provider.ErrNotFound) {
			t.Errorf("Stop(%q) = %v", id, err)
		}
	}
	if n := e.srv.Calls()[e2btest.RouteKill] + e.srv.Calls()[e2btest.RouteGet] + e.srv.Calls()[e2btest.RoutePause]; n != 0 {
		t.Errorf("%d calls sent for malformed ids", n)
	}
	if f := e.fate(sb.ID); f.State != e2btest.StateRunning {
		t.Errorf("the sandbox is %s", f.State)
	}
}

// Stop pauses: stopped, a snapshot kept; again is ErrNotStoppable; a
// paused sandbox has no timeout (ErrNotFound); Delete kills it and its
// snapshot.
func TestStopAndTimeout(t *testing.T) {
	e := newEnv(t)
	sb := e.create("run-1", nil)
	if err := e.p.SetAutoStop(ctx, sb.ID, 2); err != nil {
		t.Fatal(err)
	}
	if f := e.fate(sb.ID); f.EndAt.Sub(time.Now()) > 2*time.Minute || f.EndAt.Sub(time.Now()) < time.Minute {
		t.Errorf("after SetAutoStop(2): ends in %s", time.Until(f.EndAt))
	}
	if err := e.p.SetAutoStop(ctx, sb.ID, 0); err == nil {
		t.Error("SetAutoStop(0) accepted: it would end the sandbox")
	}
	if e.srv.Calls()[e2btest.RouteTimeout] != 1 {
		t.Errorf("timeout calls %d, want 1", e.srv.Calls()[e2btest.RouteTimeout])
	}
	if err := e.p.Stop(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	got, err := e.p.Get(ctx, sb.ID)
	if err != nil || !got.Stopped() || got.AutoStopMinutes != 0 {
		t.Errorf("after Stop: %+v, %v", got, err)
	}
	if f := e.fate(sb.ID); f.State != e2btest.StatePaused || !f.Snapshot {
		t.Errorf("fate %+v", f)
	}
	if l, err := e.p.Inspect(ctx, sb.ID); err != nil || !l.LastActivityAt.Equal(e.fate(sb.ID).EndAt) {
		t.Errorf("Inspect of a paused sandbox: %+v, %v; want its pause time as last activity", l, err)
	}
	if err := e.p.Stop(ctx, sb.ID); !errors.Is(err, provider.ErrNotStoppable) {
		t.Errorf("second Stop: %v", err)
	}
	if err := e.p.SetAutoStop(ctx, sb.ID, 5); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("SetAutoStop of a paused sandbox: %v", err)
	}
	if err := e.p.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if f := e.fate(sb.ID); f.State != e2btest.StateKilled || f.Snapshot {
		t.Errorf("after Delete: %+v", f)
	}
}

// Every error class, through the client, from the simulator.
func TestErrorClasses(t *testing.T) {
	e := newEnv(t)
	sb := e.create("run-1", nil)
	check := func(name string, err error, want ...error) {
		t.Helper()
		noKey(t, err)
		for _, w := range want {
			if !errors.Is(err, w) {
				t.Errorf("%s: %v, want %v", name, err, w)
			}
		}
	}

	e.srv.FailNext(e2btest.RouteGet, http.StatusInternalServerError, 1)
	_, err := e.p.Get(ctx, sb.ID)
	check("500", err, provider.ErrUnavailable)
	if !provider.Retryable(err) {
		t.Error("a 500 is not retryable")
	}

	// A pause while another transition runs (handlers/sandbox_pause.go:79-82).
	e.srv.Inject(e2btest.RoutePause, 1, e2btest.Scripted{Status: http.StatusConflict, Message: "Sandbox '" + sb.ID + "' cannot be paused while in 'snapshotting' state"})
	err = e.p.Stop(ctx, sb.ID)
	check("409", err, provider.ErrConflict)
	if errors.Is(err, provider.ErrNotStoppable) {
		t.Error("a 409 of another transition taken for already paused")
	}

	e.srv.Inject(e2btest.RouteKill, 1, e2btest.Scripted{Status: http.StatusTooManyRequests, RetryAfter: 7 * time.Second})
	err = e.p.Delete(ctx, sb.ID)
	check("429", err, provider.ErrRateLimited)
	var rl *provider.RateLimitError
	if !errors.As(err, &rl) || rl.RetryAfter != 7*time.Second {
		t.Errorf("429: %v", err)
	}
	if until := e.p.ExhaustedUntil(provider.CallDelete); time.Until(until) < 5*time.Second {
		t.Errorf("ExhaustedUntil(delete) = %s from now", time.Until(until))
	}
	if !e.p.ExhaustedUntil(provider.CallStop).IsZero() {
		t.Error("a 429 of DELETE marked the pause route spent")
	}

	// Beyond the team's maximum, a timeout is capped, not refused.
	if err := e.p.SetAutoStop(ctx, sb.ID, 24*60); err != nil {
		t.Errorf("SetAutoStop(1 day): %v", err)
	}

	bad := e.provider("e2b_unknown", time.Second, http.DefaultTransport)
	_, err = bad.Get(ctx, sb.ID)
	check("401", err, provider.ErrUnauthorized)
	if !provider.ConfigError(err) || provider.Retryable(err) {
		t.Errorf("401: config %v, retryable %v", provider.ConfigError(err), provider.Retryable(err))
	}
	if err := bad.Check(ctx); !errors.Is(err, provider.ErrUnauthorized) || !strings.Contains(err.Error(), e2b.EnvAPIKey) {
		t.Errorf("Check with a wrong key: %v", err)
	}
	if err := e.p.Check(ctx); err != nil {
		t.Errorf("Check: %v", err)
	}

	e.srv.AddKey("e2b_blocked", "team-b")
	e.srv.BlockTeam("team-b", "unpaid")
	blocked := e.provider("e2b_blocked", time.Second, http.DefaultTransport)
	check("403", blocked.SetTimeout(ctx, sb.ID, time.Minute), provider.ErrUnauthorized)

	e.srv.AddTeam("team-c", e2btest.Limits{Concurrency: 1})
	e.srv.AddKey("e2b_small", "team-c")
	small := e.provider("e2b_small", time.Second, http.DefaultTransport)
	if _, err := small.Create(ctx, "a", nil, e2b.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = small.Create(ctx, "b", nil, e2b.CreateOptions{})
	check("concurrency 429", err, provider.ErrRateLimited)
	if !errors.As(err, &rl) || rl.Limiter != "concurrency" || rl.RetryAfter != 0 {
		t.Errorf("concurrency 429: %+v", rl)
	}

	_, err = e.p.Create(ctx, "c", nil, e2b.CreateOptions{Timeout: 2 * time.Hour})
	check("timeout above the team's maximum", err, provider.ErrRefused)
	if err == nil || !strings.Contains(err.Error(), "Timeout cannot be greater than 1 hours") {
		t.Errorf("the server's message is lost: %v", err)
	}
}

// A hung call ends at the call timeout as ErrUnavailable (retryable); the
// caller's own deadline is not.
func TestTimeouts(t *testing.T) {
	e := newEnv(t)
	sb := e.create("run-1", nil)
	e.srv.SetFaults(e2btest.Faults{Latency: 2 * time.Second, Routes: []string{e2btest.RouteGet}})
	fast := e.provider(e2btest.DefaultKey, 100*time.Millisecond, http.DefaultTransport)
	_, err := fast.Get(ctx, sb.ID)
	if !errors.Is(err, provider.ErrUnavailable) {
		t.Errorf("call timeout: %v", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = e.p.Get(cctx, sb.ID)
	if err == nil || errors.Is(err, provider.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("caller's deadline: %v", err)
	}
}

// A redirect is not followed: the key would go with it.
func TestRedirectNotFollowed(t *testing.T) {
	e := newEnv(t)
	e.create("run-1", nil)
	var leaked bool
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked = leaked || r.Header.Get("X-API-Key") != ""
	}))
	defer elsewhere.Close()
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer redirector.Close()
	p, err := e2b.New(e2b.Config{APIKey: e2btest.DefaultKey, APIURL: redirector.URL, CallTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(ctx, "iabc"); err == nil || errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Delete through a redirect: %v", err)
	}
	if leaked {
		t.Error("the key followed a redirect to another host")
	}
}

// An https URL on a server that speaks http is a configuration error.
func TestMisconfigured(t *testing.T) {
	e := newEnv(t)
	e.create("run-1", nil) // the env's transport checks at least one exchange
	p, err := e2b.New(e2b.Config{APIKey: e2btest.DefaultKey, APIURL: strings.Replace(e.srv.URL, "http://", "https://", 1), CallTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = p.Check(ctx)
	if !errors.Is(err, provider.ErrMisconfigured) || !provider.ConfigError(err) {
		t.Errorf("https to an http server: %v", err)
	}
}

// List pages through everything the filter selects; GetByName of a name
// carried by a parent and its forks takes the first started.
func TestListPagingAndForks(t *testing.T) {
	clock := e2btest.NewManualClock(time.Now())
	e := newEnv(t, e2btest.WithClock(clock.Now))
	e.srv.AddTeam(e2btest.DefaultTeam, e2btest.Limits{Concurrency: 1000})
	var wg sync.WaitGroup
	for i := range 230 {
		wg.Go(func() {
			owner := "me"
			if i%10 == 0 {
				owner = "you"
			}
			e.srv.AddSandbox(e2btest.DefaultTeam, e2btest.SeedSandbox{Metadata: map[string]string{"tether-owner": owner}, Timeout: time.Hour, Paused: i%7 == 0})
		})
	}
	wg.Wait()
	before := e.srv.Calls()[e2btest.RouteList]
	got, err := e.p.List(ctx, map[string]string{"tether-owner": "me"})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, sb := range got {
		if seen[sb.ID] || sb.Labels["tether-owner"] != "me" {
			t.Errorf("listed %+v (twice: %v)", sb, seen[sb.ID])
		}
		seen[sb.ID] = true
	}
	if len(seen) != 207 {
		t.Errorf("listed %d, want 207", len(seen))
	}
	if pages := e.srv.Calls()[e2btest.RouteList] - before; pages != 3 {
		t.Errorf("%d pages, want 3", pages)
	}

	var swept []provider.Listed
	cursor := ""
	for range 10 {
		page, next, err := e.p.ListPage(ctx, provider.AccountQuery{Labels: map[string]string{"tether-owner": "you"}}, cursor)
		if err != nil {
			t.Fatal(err)
		}
		swept = append(swept, page...)
		if next == "" {
			break
		}
		cursor = next
	}
	if len(swept) != 23 {
		t.Errorf("ListPage: %d, want 23", len(swept))
	}
	for _, l := range swept {
		if l.Stopped() != !l.LastActivityAt.IsZero() {
			t.Errorf("%s (%s): last activity %s; want the pause time for a paused one only", l.ID, l.State, l.LastActivityAt)
		}
	}

	parent := e.create("forked", map[string]string{"tether-owner": "me"})
	clock.Advance(2 * time.Millisecond) // forks start later than their parent
	resp := forkVia(t, e.srv.URL, parent.ID)
	if resp != http.StatusCreated {
		t.Fatalf("fork: %d", resp)
	}
	got1, err := e.p.GetByName(ctx, "forked")
	if err != nil || got1.ID != parent.ID {
		t.Errorf("GetByName with a fork: %+v, %v", got1, err)
	}
}

func forkVia(t *testing.T, base, id string) int {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/sandboxes/"+id+"/fork", strings.NewReader(`{"count":2}`))
	req.Header.Set("X-API-Key", e2btest.DefaultKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// The server's RateLimit-* headers tell when a route's quota is spent,
// before a 429.
func TestThrottledFromHeaders(t *testing.T) {
	e := newEnv(t, e2btest.WithRateLimit(e2btest.PatternSandbox, e2btest.RateLimit{Rate: 1, Burst: 1, Period: time.Minute}))
	sb := e.create("run-1", nil)
	if _, err := e.p.Get(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	until := e.p.ExhaustedUntil(provider.CallRead)
	if d := time.Until(until); d < 50*time.Second || d > time.Minute+time.Second {
		t.Errorf("ExhaustedUntil(read) in %s, want about a minute", d)
	}
	if !e.p.ExhaustedUntil(provider.CallSetter).IsZero() {
		t.Error("the timeout route is marked spent")
	}
	err := e.p.Delete(ctx, sb.ID)
	var rl *provider.RateLimitError
	if !errors.As(err, &rl) || rl.RetryAfter < 50*time.Second {
		t.Errorf("Delete: %v", err)
	}
	if f := e.fate(sb.ID); f.State != e2btest.StateRunning {
		t.Errorf("a refused delete: %s", f.State)
	}
}

// swapPath sends a request for one path to another: a server or a proxy in
// front of it answering about another sandbox than the one asked for.
type swapPath struct {
	from, to string
	rt       http.RoundTripper
}

func (s swapPath) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Path == s.from {
		r := req.Clone(req.Context())
		r.URL.Path, r.URL.RawPath = s.to, ""
		return s.rt.RoundTrip(r)
	}
	return s.rt.RoundTrip(req)
}

// An answer to GET /sandboxes/{id} about another sandbox is not that
// sandbox: Get and Inspect answer ErrNotFound, never the other sandbox's
// metadata, which the reaper would take as the asked one's labels.
func TestAnswerAboutAnotherSandboxIsNotFound(t *testing.T) {
	e := newEnv(t)
	asked := e.create("asked", map[string]string{"tether-owner": "o1", "tether-intent": "i1"})
	other := e.create("other", map[string]string{"tether-owner": "o1", "tether-intent": "i2"})
	p := e.provider(e2btest.DefaultKey, 5*time.Second, swapPath{from: "/sandboxes/" + asked.ID, to: "/sandboxes/" + other.ID, rt: e.tr})
	if sb, err := p.Get(ctx, asked.ID); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Get %s answered about %s: %+v, %v; want ErrNotFound", asked.ID, other.ID, sb, err)
	}
	if sb, err := p.Inspect(ctx, asked.ID); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Inspect %s answered about %s: %+v, %v; want ErrNotFound", asked.ID, other.ID, sb, err)
	}
	for _, id := range []string{asked.ID, other.ID} {
		if f := e.fate(id); f.State != e2btest.StateRunning {
			t.Errorf("sandbox %s: %s, want running", id, f.State)
		}
	}
}

// TestSetupMessages: a refused key and a URL that is not the API's say what
// to fix on every read of the team's sandboxes (the check, and the list a
// sweep makes), and a 404 to such a read is a configuration error, never
// "sandbox not found".
func TestSetupMessages(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if err := e.p.Check(ctx); err != nil {
		t.Fatalf("Check of a good setup: %v", err)
	}
	bad := e.provider("e2b_unknown", time.Second, http.DefaultTransport)
	for name, call := range map[string]func(*e2b.Provider) error{
		"check": func(p *e2b.Provider) error { return p.Check(ctx) },
		"list":  func(p *e2b.Provider) error { _, err := p.List(ctx, nil); return err },
	} {
		if err := call(bad); !errors.Is(err, provider.ErrUnauthorized) || !strings.Contains(err.Error(), "check E2B_API_KEY") {
			t.Errorf("%s with a wrong key: %v; want unauthorized saying check E2B_API_KEY", name, err)
		}
		wrong, err := e2b.New(e2b.Config{APIKey: e2btest.DefaultKey, APIURL: e.srv.URL + "/nope", CallTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := call(wrong); !provider.ConfigError(err) || errors.Is(err, provider.ErrNotFound) || !strings.Contains(err.Error(), "E2B_API_URL does not look like the E2B API") {
			t.Errorf("%s on a URL that is not the API's: %v; want a configuration error saying so", name, err)
		}
	}
}

// dropQuery sends every request without the query parameter key: a server
// (or a proxy in front of it) that ignores the list's metadata filter.
type dropQuery struct {
	key string
	rt  http.RoundTripper
}

func (d dropQuery) RoundTrip(req *http.Request) (*http.Response, error) {
	q := req.URL.Query()
	if !q.Has(d.key) {
		return d.rt.RoundTrip(req)
	}
	q.Del(d.key)
	r := req.Clone(req.Context())
	r.URL.RawQuery = q.Encode()
	return d.rt.RoundTrip(r)
}

// A list answer that holds sandboxes of other names than the one asked
// (the metadata filter not applied): the name look-up takes only those
// whose tether-name is exactly the name, never the first listed, and one
// name that is another's prefix is another name.
func TestNameLookupTakesOnlyExactNames(t *testing.T) {
	e := newEnv(t)
	other := e.create("job-10", map[string]string{"tether-owner": "o1"})
	prefix := e.create("job-1x", map[string]string{"tether-owner": "o1"})
	asked := e.create("job-1", map[string]string{"tether-owner": "o1"})
	p := e.provider(e2btest.DefaultKey, 5*time.Second, dropQuery{key: "metadata", rt: e.tr})
	if all, err := p.List(ctx, map[string]string{e2b.MetadataName: "job-1"}); err != nil || len(all) != 3 {
		t.Fatalf("the unfiltered list holds %d sandboxes (%v), want all 3: the test shows nothing", len(all), err)
	}
	named, err := p.Named(ctx, "job-1")
	if err != nil || len(named) != 1 || named[0].ID != asked.ID {
		t.Fatalf("Named(job-1) = %+v, %v; want only %s", named, err, asked.ID)
	}
	sb, err := p.GetByName(ctx, "job-1")
	if err != nil || sb.ID != asked.ID || sb.Name != "job-1" {
		t.Fatalf("GetByName(job-1) = %+v, %v; want %s", sb, err, asked.ID)
	}
	if sb, err := p.GetByName(ctx, "job-2"); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("GetByName of a name none carries = %+v, %v; want ErrNotFound", sb, err)
	}
	for _, id := range []string{other.ID, prefix.ID, asked.ID} {
		if f := e.fate(id); f.State != e2btest.StateRunning {
			t.Errorf("sandbox %s: %s, want running", id, f.State)
		}
	}
}
