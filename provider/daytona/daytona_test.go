package daytona_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-run/tether/internal/testutil"

	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/daytona"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// pollTimeout bounds every wait for a simulated state change.
const pollTimeout = testutil.WaitBound

func TestConfigFromEnv(t *testing.T) {
	vars := []string{daytona.EnvAPIKey, daytona.EnvJWTToken, daytona.EnvOrganizationID,
		daytona.EnvAPIURL, daytona.EnvServerURL, daytona.EnvTarget}
	tests := []struct {
		name    string
		env     map[string]string
		want    daytona.Config
		wantErr string
	}{
		{name: "nothing", env: nil, wantErr: "no Daytona credentials"},
		{name: "key only", env: map[string]string{"DAYTONA_API_KEY": "k"},
			want: daytona.Config{APIKey: "k", APIURL: daytona.DefaultAPIURL}},
		{name: "everything", env: map[string]string{"DAYTONA_API_KEY": "k", "DAYTONA_API_URL": "http://x/api", "DAYTONA_TARGET": "eu"},
			want: daytona.Config{APIKey: "k", APIURL: "http://x/api", Target: "eu"}},
		{name: "server url is the fallback", env: map[string]string{"DAYTONA_API_KEY": "k", "DAYTONA_SERVER_URL": "http://old/api"},
			want: daytona.Config{APIKey: "k", APIURL: "http://old/api"}},
		{name: "api url wins over server url", env: map[string]string{"DAYTONA_API_KEY": "k", "DAYTONA_SERVER_URL": "http://old/api", "DAYTONA_API_URL": "http://new/api"},
			want: daytona.Config{APIKey: "k", APIURL: "http://new/api"}},
		{name: "jwt needs organization", env: map[string]string{"DAYTONA_JWT_TOKEN": "j"}, wantErr: "DAYTONA_ORGANIZATION_ID is required"},
		{name: "jwt with organization", env: map[string]string{"DAYTONA_JWT_TOKEN": "j", "DAYTONA_ORGANIZATION_ID": "o"},
			want: daytona.Config{JWTToken: "j", OrganizationID: "o", APIURL: daytona.DefaultAPIURL}},
		{name: "key and jwt: both kept, the key is used", env: map[string]string{"DAYTONA_API_KEY": "k", "DAYTONA_JWT_TOKEN": "j"},
			want: daytona.Config{APIKey: "k", JWTToken: "j", APIURL: daytona.DefaultAPIURL}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, v := range vars {
				t.Setenv(v, "")
			}
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			got, err := daytona.ConfigFromEnv()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.APIKey != tt.want.APIKey || got.APIURL != tt.want.APIURL || got.Target != tt.want.Target ||
				got.JWTToken != tt.want.JWTToken || got.OrganizationID != tt.want.OrganizationID {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, cfg := range []daytona.Config{
		{},
		{JWTToken: "j"},
		{APIKey: "k", APIURL: "ftp://x"},
		{APIKey: "k", APIURL: "not a url"},
		{APIKey: "k", CallTimeout: -time.Second},
	} {
		if _, err := daytona.New(cfg); err == nil {
			t.Errorf("New(%v) = nil error", cfg)
		}
	}
}

func TestFingerprint(t *testing.T) {
	a := daytona.Fingerprint("https://app.daytona.io/api", "key-1")
	if a != daytona.Fingerprint("https://APP.daytona.io/api/", "key-1") {
		t.Error("fingerprint depends on URL case or trailing slash")
	}
	if a == daytona.Fingerprint("https://app.daytona.io/api", "key-2") {
		t.Error("two keys share a fingerprint")
	}
	if a == daytona.Fingerprint("https://eu.daytona.io/api", "key-1") {
		t.Error("two URLs share a fingerprint")
	}
	if strings.Contains(a, "key-1") {
		t.Error("fingerprint contains the key")
	}
	p, err := daytona.New(daytona.Config{APIKey: "key-1", APIURL: "https://app.daytona.io/api"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Account() != a || p.Name() != "daytona" {
		t.Errorf("Account/Name = %q/%q", p.Account(), p.Name())
	}
	// A JWT is short-lived: the account is the organization, not the token.
	j1, _ := daytona.New(daytona.Config{JWTToken: "t1", OrganizationID: "o", APIURL: "https://app.daytona.io/api"})
	j2, _ := daytona.New(daytona.Config{JWTToken: "t2", OrganizationID: "o", APIURL: "https://app.daytona.io/api"})
	if j1.Account() != j2.Account() {
		t.Error("JWT account changes with the token")
	}
}

func TestRoundTrip(t *testing.T) {
	s, p := testutil.Daytona(t, daytonatest.WithDestroyDelay(time.Hour))
	ctx := context.Background()
	labels := map[string]string{"tether-owner": "o1", "tether-intent": "i1"}

	zero := 0
	sb, err := p.Create(ctx, "tether-i1", labels, &zero)
	if err != nil {
		t.Fatal(err)
	}
	// Daytona answers a create after its wait for started, with the
	// sandbox as it was inserted (daytonatest's create).
	if sb.Name != "tether-i1" || sb.State != "creating" || sb.AutoStopMinutes != 0 ||
		sb.Labels["tether-intent"] != "i1" || sb.CreatedAt.IsZero() {
		t.Fatalf("created %+v", sb)
	}
	got, err := p.Get(ctx, sb.ID)
	if err != nil || got.ID != sb.ID || got.Name != sb.Name {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	got, err = p.GetByName(ctx, "tether-i1")
	if err != nil || got.ID != sb.ID {
		t.Fatalf("GetByName = %+v, %v", got, err)
	}
	if err := p.SetAutoStop(ctx, sb.ID, 15); err != nil {
		t.Fatal(err)
	}
	if got, _ := p.Get(ctx, sb.ID); got.AutoStopMinutes != 15 {
		t.Errorf("auto-stop = %d, want 15", got.AutoStopMinutes)
	}
	list, err := p.List(ctx, map[string]string{"tether-owner": "o1"})
	if err != nil || len(list) != 1 || list[0].ID != sb.ID || list[0].Labels["tether-intent"] != "i1" {
		t.Fatalf("List = %+v, %v", list, err)
	}
	if err := p.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	got, err = p.Get(ctx, sb.ID)
	if err != nil || got.State != provider.StateDestroying || !strings.HasPrefix(got.Name, "DESTROYED_tether-i1_") {
		t.Fatalf("after delete: %+v, %v", got, err)
	}
	if _, err := p.GetByName(ctx, "tether-i1"); !errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("GetByName after delete: %v, want ErrNotFound (renamed)", err)
	}
	if err := s.Release(sb.ID); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "gone", func() bool { _, err := p.Get(ctx, sb.ID); return errors.Is(err, provider.ErrNotFound) })
}

func TestStop(t *testing.T) {
	_, p := testutil.Daytona(t)
	ctx := context.Background()
	sb, err := p.Create(ctx, "tether-stop", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sb.AutoStopMinutes != 15 {
		t.Errorf("default auto-stop = %d, want the server's 15", sb.AutoStopMinutes)
	}
	if err := p.Stop(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "stopped", func() bool { got, _ := p.Get(ctx, sb.ID); return got.Stopped() })
}

// GET /sandbox/{idOrName} resolves ids first: neither lookup may be fooled
// by a sandbox whose name is another's id.
func TestIDNameConfusion(t *testing.T) {
	_, p := testutil.Daytona(t)
	ctx := context.Background()
	a, err := p.Create(ctx, "alpha", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Create(ctx, a.ID, nil, nil) // named with a's id
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.GetByName(ctx, a.ID)
	if err != nil || got.ID != b.ID {
		t.Fatalf("GetByName(a's id) = %+v, %v; want b", got, err)
	}
	if _, err := p.Get(ctx, "alpha"); !errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("Get(a name) = %v, want ErrNotFound", err)
	}
	if _, err := p.GetByName(ctx, "alph"); !errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("GetByName(prefix) = %v, want ErrNotFound", err)
	}
}

func TestListPagesAndFilters(t *testing.T) {
	s, p := testutil.Daytona(t)
	const n = 650
	want := 0 // more than two pages of 200
	for i := range n {
		labels := map[string]string{"scope": "a"}
		if i%3 == 0 {
			labels["scope"] = "b"
		} else {
			want++
		}
		if _, err := s.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Labels: labels}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := p.List(context.Background(), map[string]string{"scope": "a"})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, sb := range got {
		if sb.Labels["scope"] != "a" || seen[sb.ID] {
			t.Fatalf("bad or repeated item %+v", sb)
		}
		seen[sb.ID] = true
	}
	if len(got) != want {
		t.Fatalf("listed %d, want %d", len(got), want)
	}
	if c := s.Calls()[daytonatest.RouteList]; c != 3 {
		t.Errorf("list calls = %d, want 3 pages", c)
	}
}

func TestOtherAccountsAreInvisible(t *testing.T) {
	s, _ := testutil.Daytona(t)
	s.AddKey("key-2", "org-2")
	mine := testutil.DaytonaProvider(t, s)
	theirs := testutil.DaytonaProvider(t, s, func(c *daytona.Config) { c.APIKey = "key-2" })
	ctx := context.Background()
	sb, err := theirs.Create(ctx, "tether-x", map[string]string{"tether-owner": "o1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mine.Get(ctx, sb.ID); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Get across accounts: %v", err)
	}
	if _, err := mine.GetByName(ctx, "tether-x"); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("GetByName across accounts: %v", err)
	}
	if err := mine.Delete(ctx, sb.ID); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Delete across accounts: %v", err)
	}
	if mine.Account() == theirs.Account() {
		t.Error("two keys share an account fingerprint")
	}
	if rec, _ := s.Sandbox(sb.ID); rec.DeleteRequested {
		t.Error("a foreign sandbox was deleted")
	}
}

func TestJWT(t *testing.T) {
	s, _ := testutil.Daytona(t)
	s.AddJWT("jwt-1", "org-7")
	p := testutil.DaytonaProvider(t, s, func(c *daytona.Config) { c.APIKey, c.JWTToken, c.OrganizationID = "", "jwt-1", "org-7" })
	sb, err := p.Create(context.Background(), "tether-j", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rec, _ := s.Sandbox(sb.ID); rec.Org != "org-7" {
		t.Errorf("created in %q, want org-7", rec.Org)
	}
}

func TestErrorMapping(t *testing.T) {
	tests := []struct {
		status    int
		want      error
		retryable bool
	}{
		{404, provider.ErrNotFound, false},
		{409, provider.ErrConflict, true},
		{429, provider.ErrRateLimited, true},
		{401, provider.ErrUnauthorized, false},
		{403, provider.ErrUnauthorized, false}, // a 403 other than "Invalid authentication context": final at once
		{500, provider.ErrUnavailable, true},
		{502, provider.ErrUnavailable, true},
		{503, provider.ErrUnavailable, true},
		{400, provider.ErrRefused, false},
	}
	s, p := testutil.Daytona(t)
	ctx := context.Background()
	sb, err := p.Create(ctx, "tether-e", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]func() error{
		daytonatest.RouteGet:      func() error { _, err := p.Get(ctx, sb.ID); return err },
		daytonatest.RouteDelete:   func() error { return p.Delete(ctx, sb.ID) },
		daytonatest.RouteStop:     func() error { return p.Stop(ctx, sb.ID) },
		daytonatest.RouteList:     func() error { _, err := p.List(ctx, nil); return err },
		daytonatest.RouteAutoStop: func() error { return p.SetAutoStop(ctx, sb.ID, 5) },
	}
	for _, tt := range tests {
		for route, call := range calls {
			t.Run(fmt.Sprintf("%d/%s", tt.status, route), func(t *testing.T) {
				msg := ""
				if tt.status == 403 {
					msg = "Forbidden resource"
				}
				s.Inject(route, 1, daytonatest.Scripted{Status: tt.status, Message: msg})
				err := call()
				if err == nil {
					t.Fatal("no error")
				}
				if tt.status == 404 && route == daytonatest.RouteList {
					// No Daytona answers 404 to a list: the URL is wrong.
					if !errors.Is(err, provider.ErrMisconfigured) || errors.Is(err, provider.ErrNotFound) || !strings.Contains(err.Error(), "DAYTONA_API_URL does not look like the Daytona API") {
						t.Fatalf("err = %v, want a configuration error naming DAYTONA_API_URL, not sandbox not found", err)
					}
					return
				}
				if tt.status == 401 || tt.status == 403 {
					if !strings.Contains(err.Error(), "check DAYTONA_API_KEY") {
						t.Errorf("err = %v does not say to check DAYTONA_API_KEY", err)
					}
				}
				if tt.want != nil && !errors.Is(err, tt.want) {
					t.Fatalf("err = %v, want %v", err, tt.want)
				}
				for _, other := range []error{provider.ErrNotFound, provider.ErrConflict, provider.ErrRateLimited, provider.ErrUnauthorized, provider.ErrUnavailable, provider.ErrRefused, provider.ErrPermission} {
					if other != tt.want && errors.Is(err, other) {
						t.Errorf("err = %v also matches %v", err, other)
					}
				}
				if provider.Retryable(err) != tt.retryable {
					t.Errorf("Retryable(%v) = %v", err, !tt.retryable)
				}
				if !strings.Contains(err.Error(), fmt.Sprint(tt.status)) {
					t.Errorf("err %q does not say the status", err)
				}
			})
		}
	}
	if rec, _ := s.Sandbox(sb.ID); rec.DeleteRequested || rec.AutoStopInterval != 15 {
		t.Errorf("a failed call took effect: %+v", rec)
	}
}

func TestRetryAfter(t *testing.T) {
	for _, tt := range []struct {
		faults   daytonatest.Faults
		min, max time.Duration
	}{
		{daytonatest.Faults{RetryAfter: 3 * time.Second}, 3 * time.Second, 3 * time.Second},
		{daytonatest.Faults{RetryAfter: 2 * time.Second, PlainRetryAfter: true}, 2 * time.Second, 2 * time.Second},
		// As an HTTP date, the hint is relative to now, with one-second precision.
		{daytonatest.Faults{RetryAfter: 30 * time.Second, RetryAfterDate: true}, 25 * time.Second, 31 * time.Second},
		{daytonatest.Faults{}, daytonatest.DefaultRetryAfter, daytonatest.DefaultRetryAfter},
	} {
		s, p := testutil.Daytona(t, daytonatest.WithFaults(tt.faults))
		s.FailNext(daytonatest.RouteGet, 429, 1)
		_, err := p.Get(context.Background(), "x")
		var rl *provider.RateLimitError
		if !errors.As(err, &rl) {
			t.Fatalf("err = %v, want *RateLimitError", err)
		}
		if rl.RetryAfter < tt.min || rl.RetryAfter > tt.max {
			t.Errorf("%v: RetryAfter = %s, want in [%s, %s]", tt.faults, rl.RetryAfter, tt.min, tt.max)
		}
	}
}

// A hung call ends at the per-call timeout as ErrUnavailable (retryable);
// the caller's own deadline ends it as the caller's error (not retryable).
func TestTimeouts(t *testing.T) {
	s, _ := testutil.Daytona(t)
	p := testutil.DaytonaProvider(t, s, func(c *daytona.Config) { c.CallTimeout = 50 * time.Millisecond })
	s.Inject(daytonatest.RouteGet, 1, daytonatest.Scripted{Hang: true})
	_, err := p.Get(context.Background(), "x")
	if !errors.Is(err, provider.ErrUnavailable) || !provider.Retryable(err) {
		t.Fatalf("hung call: %v, want retryable ErrUnavailable", err)
	}

	slow := testutil.DaytonaProvider(t, s, func(c *daytona.Config) { c.CallTimeout = time.Hour })
	s.Inject(daytonatest.RouteDelete, 1, daytonatest.Scripted{Hang: true})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err = slow.Delete(ctx, "x")
	if !errors.Is(err, context.DeadlineExceeded) || provider.Retryable(err) {
		t.Fatalf("caller's deadline: %v, want DeadlineExceeded, not retryable", err)
	}
}

func TestConnectionRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	p, err := daytona.New(daytona.Config{APIKey: "k", APIURL: "http://" + addr + "/api"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Get(context.Background(), "x"); !errors.Is(err, provider.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
}

// The create that allocates and then fails (a create that times out after the allocation): the caller
// gets an error, the sandbox exists, and its exact name finds it.
func TestLostCreateIsFoundByName(t *testing.T) {
	for _, f := range []daytonatest.Scripted{{Status: 500, After: true}, {Hang: true, After: true}} {
		s, _ := testutil.Daytona(t)
		p := testutil.DaytonaProvider(t, s, func(c *daytona.Config) { c.CallTimeout = 100 * time.Millisecond })
		s.Inject(daytonatest.RouteCreate, 1, f)
		_, err := p.Create(context.Background(), "tether-lost", map[string]string{"tether-intent": "i"}, nil)
		if !errors.Is(err, provider.ErrUnavailable) {
			t.Fatalf("%+v: create err = %v, want ErrUnavailable", f, err)
		}
		got, err := p.GetByName(context.Background(), "tether-lost")
		if err != nil || got.Labels["tether-intent"] != "i" {
			t.Fatalf("%+v: the allocated sandbox is not found by name: %+v, %v", f, got, err)
		}
	}
}

// A sandbox stuck in `starting` answers 409 to delete until it has started.
func TestStuckStartingConflicts(t *testing.T) {
	s, p := testutil.Daytona(t, daytonatest.WithFaults(daytonatest.Faults{Starting: time.Hour}), daytonatest.WithCreateWait(0))
	ctx := context.Background()
	sb, err := p.Create(ctx, "tether-st", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "starting", func() bool { got, _ := p.Get(ctx, sb.ID); return got.State == "starting" })
	if err := p.Delete(ctx, sb.ID); !errors.Is(err, provider.ErrConflict) {
		t.Fatalf("delete while starting: %v, want ErrConflict", err)
	}
	if err := p.Stop(ctx, sb.ID); !errors.Is(err, provider.ErrConflict) {
		t.Fatalf("stop while starting: %v, want ErrConflict", err)
	}
	if err := s.Hold(sb.ID, "starting", time.Nanosecond); err != nil { // let it finish starting
		t.Fatal(err)
	}
	testutil.WaitFor(t, "started", func() bool { got, _ := p.Get(ctx, sb.ID); return got.State == provider.StateStarted })
	if err := p.Delete(ctx, sb.ID); err != nil {
		t.Fatalf("delete once started: %v", err)
	}
}

// secretKey is distinctive so that any leak is found by substring search.
const secretKey = "sk-LEAK-CANARY-0123456789abcdef"

// TestKeyNeverLeaks makes calls fail in every way while the server echoes
// the Authorization header back in its error bodies, and asserts that the
// key appears in no error and no log line.
func TestKeyNeverLeaks(t *testing.T) {
	var mu sync.Mutex
	mode := 0
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		m := mode
		mu.Unlock()
		auth := r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "application/json")
		switch m {
		case 0: // hang until the client gives up
			_, _ = io.Copy(io.Discard, r.Body) // net/http notices a hang-up only after the body
			<-r.Context().Done()
			return
		case 1: // a success the client cannot decode, echoing the key
			w.WriteHeader(200)
			fmt.Fprintf(w, `{"id":%q}`, auth)
			return
		case 2: // a body that is not JSON
			w.WriteHeader(500)
			fmt.Fprintf(w, "upstream said: %s", auth)
			return
		}
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(m)
		fmt.Fprintf(w, `{"statusCode":%d,"message":"bad token %s (escaped %s)","error":"x","path":%q,"timestamp":"2026-01-01T00:00:00.000Z"}`,
			m, auth, strings.ReplaceAll(auth, " ", "%20"), r.URL.Path)
	}))
	defer echo.Close()

	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	for _, cfg := range []daytona.Config{
		{APIKey: secretKey, APIURL: echo.URL + "/api", CallTimeout: 50 * time.Millisecond, Logger: logger},
		{JWTToken: secretKey, OrganizationID: "org", APIURL: echo.URL + "/api", CallTimeout: 50 * time.Millisecond, Logger: logger},
	} {
		p, err := daytona.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var errs []string
		for _, m := range []int{0, 1, 2, 400, 401, 403, 404, 409, 429, 500, 503} {
			mu.Lock()
			mode = m
			mu.Unlock()
			ctx := context.Background()
			_, e1 := p.Get(ctx, "sb")
			_, e2 := p.GetByName(ctx, "sb")
			_, e3 := p.List(ctx, map[string]string{"a": "b"})
			e4 := p.Delete(ctx, "sb")
			e5 := p.Stop(ctx, "sb")
			e6 := p.SetAutoStop(ctx, "sb", 1)
			_, e7 := p.Create(ctx, "sb", nil, nil)
			for _, e := range []error{e1, e2, e3, e4, e5, e6, e7} {
				if e == nil {
					t.Fatalf("mode %d: a call succeeded", m)
				}
				errs = append(errs, e.Error(), fmt.Sprintf("%+v", e), fmt.Sprintf("%#v", e))
			}
		}
		// A caller's cancelled context and an unreachable server too.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, e := p.Get(ctx, "sb")
		errs = append(errs, e.Error())
		errs = append(errs, fmt.Sprintf("%v %+v %#v %s", cfg, cfg, cfg, cfg))
		logger.Info("config", "cfg", cfg)
		for _, e := range errs {
			if strings.Contains(e, "LEAK-CANARY") {
				t.Fatalf("the key leaked into an error: %s", e)
			}
		}
	}
	if logs.Len() == 0 {
		t.Fatal("no log lines captured: the test proves nothing")
	}
	if strings.Contains(logs.String(), "LEAK-CANARY") {
		t.Fatalf("the key leaked into the log:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "[REDACTED]") {
		t.Error("nothing was redacted: did the server echo the key at all?")
	}
}

func BenchmarkGet(b *testing.B) {
	_, p := testutil.Daytona(b, daytonatest.WithCreateDelay(0))
	sb, err := p.Create(context.Background(), "bench", nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := p.Get(context.Background(), sb.ID); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkList1000(b *testing.B) {
	s, p := testutil.Daytona(b)
	for i := range 1000 {
		labels := map[string]string{"scope": fmt.Sprint(i % 2)}
		if _, err := s.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Labels: labels}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		got, err := p.List(context.Background(), map[string]string{"scope": "1"})
		if err != nil || len(got) != 500 {
			b.Fatal(len(got), err)
		}
	}
}

// Daytona's 429s name their throttler: Retry-After-<throttler>, not a
// plain Retry-After; the quota left shows in X-RateLimit-*-<throttler>.
func TestRateLimitHeaders(t *testing.T) {
	_, p := testutil.Daytona(t, daytonatest.WithRateLimit(daytonatest.ThrottlerSandboxLifecycle, 1, time.Minute))
	ctx := context.Background()
	a, err := p.Create(ctx, "tether-rl-a", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Create(ctx, "tether-rl-b", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !p.ExhaustedUntil(provider.CallDelete).IsZero() {
		t.Fatal("quota known spent before any lifecycle call")
	}
	if err := p.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	// That delete spent the quota of 1: the answer said remaining 0, reset 60 s.
	until := p.ExhaustedUntil(provider.CallDelete)
	if d := time.Until(until); d < 55*time.Second || d > 61*time.Second {
		t.Fatalf("lifecycle quota spent until %s from now, want about 60 s", d)
	}
	if !p.ExhaustedUntil(provider.CallRead).IsZero() {
		t.Fatal("reads count against another throttler")
	}
	err = p.Stop(ctx, b.ID)
	var rl *provider.RateLimitError
	if !errors.As(err, &rl) || rl.Limiter != "sandbox-lifecycle" || rl.RetryAfter != time.Minute {
		t.Fatalf("stop inside the window: %v (%+v), want rate limited by sandbox-lifecycle, 60 s", err, rl)
	}
	if !strings.Contains(err.Error(), "sandbox-lifecycle") {
		t.Errorf("error %q does not name the throttler", err)
	}
}

// 403 "Invalid authentication context" is retried a bounded number of
// times; 401 and 403 "Access denied" are final, the latter naming the
// permission the key lacks.
func TestForbidden(t *testing.T) {
	s, _ := testutil.Daytona(t)
	p := testutil.DaytonaProvider(t, s, func(c *daytona.Config) { c.AuthContextRetryWait = time.Millisecond })
	ctx := context.Background()
	sb, err := p.Create(ctx, "tether-403", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Inject(daytonatest.RouteGet, daytona.DefaultAuthContextRetries, daytonatest.Scripted{Status: 403})
	before := s.Calls()[daytonatest.RouteGet]
	if _, err := p.Get(ctx, sb.ID); err != nil {
		t.Fatalf("a transient 403 %d times: %v", daytona.DefaultAuthContextRetries, err)
	}
	if n := s.Calls()[daytonatest.RouteGet] - before; n != daytona.DefaultAuthContextRetries+1 {
		t.Errorf("%d reads, want %d", n, daytona.DefaultAuthContextRetries+1)
	}
	s.Inject(daytonatest.RouteGet, daytona.DefaultAuthContextRetries+1, daytonatest.Scripted{Status: 403})
	before = s.Calls()[daytonatest.RouteGet]
	_, err = p.Get(ctx, sb.ID)
	if !errors.Is(err, provider.ErrUnauthorized) || provider.Retryable(err) || !strings.Contains(err.Error(), "Invalid authentication context") {
		t.Fatalf("a 403 that persists: %v, want final ErrUnauthorized", err)
	}
	if n := s.Calls()[daytonatest.RouteGet] - before; n != daytona.DefaultAuthContextRetries+1 {
		t.Errorf("%d reads for a persisting 403, want %d", n, daytona.DefaultAuthContextRetries+1)
	}

	s.Inject(daytonatest.RouteGet, 1, daytonatest.Scripted{Status: 401})
	before = s.Calls()[daytonatest.RouteGet]
	if _, err := p.Get(ctx, sb.ID); !errors.Is(err, provider.ErrUnauthorized) || s.Calls()[daytonatest.RouteGet]-before != 1 {
		t.Fatalf("401: %v after %d calls, want final at once", err, s.Calls()[daytonatest.RouteGet]-before)
	}

	const scoped = "dtn_scoped_key_without_delete"
	s.AddKeyWithPermissions(scoped, daytonatest.DefaultOrg, daytonatest.PermWriteSandboxes)
	sp := testutil.DaytonaProvider(t, s, func(c *daytona.Config) { c.APIKey = scoped })
	err = sp.Delete(ctx, sb.ID)
	var pe *provider.PermissionError
	if !errors.As(err, &pe) || pe.Permission != "delete:sandboxes" || !errors.Is(err, provider.ErrUnauthorized) || !errors.Is(err, provider.ErrPermission) {
		t.Fatalf("delete without the permission: %v, want a PermissionError for delete:sandboxes", err)
	}
	if !strings.Contains(err.Error(), "configuration error") || !strings.Contains(err.Error(), `"delete:sandboxes"`) {
		t.Errorf("error %q does not say it is a configuration error naming the permission", err)
	}
	if rec, _ := s.Sandbox(sb.ID); rec.DeleteRequested {
		t.Fatal("the forbidden delete took effect")
	}
}

// Stop answers 400 for a sandbox already stopped or archived, and for an
// errored one; each has its own error.
func TestStopRefusals(t *testing.T) {
	s, p := testutil.Daytona(t)
	for state, want := range map[string]error{"stopped": provider.ErrNotStoppable, "archived": provider.ErrNotStoppable, "error": provider.ErrErrored} {
		sb, err := s.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{State: state})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Stop(context.Background(), sb.ID); !errors.Is(err, want) || provider.Retryable(err) {
			t.Errorf("stop of %s: %v, want %v", state, err, want)
		}
	}
}

// TestShortKeyIsNotRedactedEverywhere: a key too short to be a real one
// ("k") is not hunted through every message, which would turn each "k"
// into [REDACTED]; the server refuses it anyway.
func TestShortKeyIsNotRedactedEverywhere(t *testing.T) {
	s, _ := testutil.Daytona(t)
	p := testutil.DaytonaProvider(t, s, func(c *daytona.Config) { c.APIKey = "k" })
	_, err := p.Get(t.Context(), "sb")
	if err == nil || strings.Contains(err.Error(), "REDACTED") || !strings.Contains(err.Error(), "unauthorized") {
		t.Fatalf("short key: %v", err)
	}
}
