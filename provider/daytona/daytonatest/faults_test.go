package daytonatest_test

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tether-run/tether/internal/testutil"

	apiclient "github.com/daytonaio/daytona/libs/api-client-go"

	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

func TestParseFaults(t *testing.T) {
	tests := []struct {
		spec    string
		want    daytonatest.Faults
		wantErr string
	}{
		{spec: "", want: daytonatest.Faults{}},
		{spec: "latency=50ms,429=0.1,5xx=0.05,destroying=2s,seed=1", want: daytonatest.Faults{
			Seed: 1, Latency: 50 * time.Millisecond, Rate429: 0.1, Rate5xx: 0.05, Destroying: 2 * time.Second}},
		{spec: " retry-after=3s , retry-after-date=true,hang=0.01,create-lost=0.2,create-hang=0.3,starting=1s,list-lag=500ms,routes=get+delete", want: daytonatest.Faults{
			RetryAfter: 3 * time.Second, RetryAfterDate: true, RateHang: 0.01, CreateLost: 0.2, CreateHang: 0.3,
			Starting: time.Second, ListLag: 500 * time.Millisecond, Routes: []string{"get", "delete"}}},
		{spec: "plain-retry-after=true,create-fail-start=0.1,404=0.02,403=0.03,modified=0.4,destroy-lag=10s", want: daytonatest.Faults{
			PlainRetryAfter: true, CreateFailStart: 0.1, Rate404: 0.02, Rate403: 0.03, RateModified: 0.4, DestroyLag: 10 * time.Second}},
		{spec: "latency", wantErr: "want key=value"},
		{spec: "bogus=1", wantErr: "unknown key"},
		{spec: "429=1.5", wantErr: "out of range"},
		{spec: "5xx=-0.1", wantErr: "out of range"},
		{spec: "hang=NaN", wantErr: "out of range"},
		{spec: "latency=fast", wantErr: "latency"},
		{spec: "destroying=-1s", wantErr: "negative"},
		{spec: "seed=x", wantErr: "seed"},
		{spec: "routes=get+nope", wantErr: "unknown route"},
	}
	for _, tt := range tests {
		got, err := daytonatest.ParseFaults(tt.spec)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseFaults(%q) err = %v, want %q", tt.spec, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseFaults(%q): %v", tt.spec, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseFaults(%q) = %+v, want %+v", tt.spec, got, tt.want)
		}
		// String is the inverse of ParseFaults.
		again, err := daytonatest.ParseFaults(got.String())
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Errorf("round trip of %q via %q = %+v, %v", tt.spec, got.String(), again, err)
		}
	}
}

func FuzzParseFaults(f *testing.F) {
	f.Add("latency=50ms,429=0.1,5xx=0.05,destroying=2s,seed=1")
	f.Add("routes=get+delete,hang=1")
	f.Add("=,,==")
	f.Fuzz(func(t *testing.T, spec string) {
		got, err := daytonatest.ParseFaults(spec)
		if err != nil {
			return
		}
		again, err := daytonatest.ParseFaults(got.String())
		if err != nil {
			t.Fatalf("String() of a parsed spec does not parse: %q: %v", got.String(), err)
		}
		if again.String() != got.String() {
			t.Fatalf("round trip changed %q to %q", got.String(), again.String())
		}
	})
}

// outcomes runs n GETs of an unknown sandbox and returns their statuses.
func outcomes(t *testing.T, s *daytonatest.Server, n int) []int {
	t.Helper()
	c := newClient(t, s, daytonatest.DefaultKey)
	out := make([]int, n)
	for i := range out {
		_, resp, _ := c.api.SandboxAPI.GetSandbox(c.ctx, "missing").Execute()
		out[i] = status(resp)
	}
	return out
}

func TestRandomFaultsAreSeeded(t *testing.T) {
	f := daytonatest.Faults{Seed: 42, Rate5xx: 0.3, Rate429: 0.3}
	a := outcomes(t, newServer(t, daytonatest.WithFaults(f)), 60)
	b := outcomes(t, newServer(t, daytonatest.WithFaults(f)), 60)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed, different faults:\n%v\n%v", a, b)
	}
	count := map[int]int{}
	for _, st := range a {
		count[st]++
	}
	if count[503] == 0 || count[429] == 0 || count[404] == 0 || len(count) != 3 {
		t.Fatalf("statuses %v: want a mix of 503, 429 and the real 404", count)
	}
	f.Seed = 43
	if c := outcomes(t, newServer(t, daytonatest.WithFaults(f)), 60); reflect.DeepEqual(a, c) {
		t.Error("another seed gives the same faults")
	}
}

func TestFaultRoutesScope(t *testing.T) {
	s := newServer(t, daytonatest.WithFaults(daytonatest.Faults{Rate5xx: 1, Routes: []string{daytonatest.RouteDelete}}))
	c := newClient(t, s, daytonatest.DefaultKey)
	sb := c.create(t, "scoped", nil) // create is out of scope: it works
	if _, resp, _ := c.api.SandboxAPI.DeleteSandbox(c.ctx, sb.GetId()).Execute(); status(resp) != 503 {
		t.Fatalf("delete in scope: status %d, want 503", status(resp))
	}
	if rec, _ := s.Sandbox(sb.GetId()); rec.DeleteRequested {
		t.Fatal("a delete answered 503 before doing anything took effect")
	}
}

func TestRateLimitCarriesRetryAfter(t *testing.T) {
	s := newServer(t, daytonatest.WithFaults(daytonatest.Faults{Rate429: 1, RetryAfter: 1500 * time.Millisecond}))
	c := newClient(t, s, daytonatest.DefaultKey)
	_, resp, err := c.api.SandboxAPI.ListSandboxes(c.ctx).Execute()
	if status(resp) != 429 {
		t.Fatalf("status %d", status(resp))
	}
	// A list counts against the `authenticated` throttler; the real server
	// names it in the header and sends no plain Retry-After.
	if got := resp.Header.Get("Retry-After-authenticated"); got != "2" {
		t.Errorf("Retry-After-authenticated = %q, want whole seconds rounded up, 2", got)
	}
	if got := resp.Header.Get("Retry-After"); got != "" {
		t.Errorf("plain Retry-After = %q on a throttler's 429", got)
	}
	assertErrorBody(t, body(err), 429, "/api/sandbox")
	// A delete counts against `sandbox-lifecycle`.
	req, _ := http.NewRequest("DELETE", s.URL+"/sandbox/x", nil)
	req.Header.Set("Authorization", "Bearer "+daytonatest.DefaultKey)
	dresp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	dresp.Body.Close()
	if got := dresp.Header.Get("Retry-After-sandbox-lifecycle"); dresp.StatusCode != 429 || got != "2" {
		t.Errorf("delete: %d, Retry-After-sandbox-lifecycle = %q", dresp.StatusCode, got)
	}
	if st := s.Throttle(); st.Refused["authenticated"] != 1 || st.Refused["sandbox-lifecycle"] != 1 || st.InWindow["authenticated"] != 0 {
		t.Errorf("throttle stats %+v", st)
	}
	// Another list inside the announced window is counted as such.
	c.api.SandboxAPI.ListSandboxes(c.ctx).Execute()
	if st := s.Throttle(); st.InWindow["authenticated"] != 1 {
		t.Errorf("in-window requests %+v, want 1 for authenticated", st.InWindow)
	}

	s.SetFaults(daytonatest.Faults{Rate429: 1, RetryAfter: 3 * time.Second, PlainRetryAfter: true})
	_, resp, _ = c.api.SandboxAPI.ListSandboxes(c.ctx).Execute()
	if got := resp.Header.Get("Retry-After"); got != "3" {
		t.Errorf("plain Retry-After = %q, want 3", got)
	}

	s.SetFaults(daytonatest.Faults{Rate429: 1, RetryAfter: time.Minute, RetryAfterDate: true})
	_, resp, _ = c.api.SandboxAPI.ListSandboxes(c.ctx).Execute()
	when, err := http.ParseTime(resp.Header.Get("Retry-After"))
	if err != nil || time.Until(when) < 50*time.Second {
		t.Errorf("Retry-After date %q: %v", resp.Header.Get("Retry-After"), err)
	}
}

func TestLatency(t *testing.T) {
	s := newServer(t, daytonatest.WithFaults(daytonatest.Faults{Latency: 30 * time.Millisecond}))
	c := newClient(t, s, daytonatest.DefaultKey)
	start := time.Now()
	if _, _, err := c.api.SandboxAPI.ListSandboxes(c.ctx).Execute(); err != nil {
		t.Fatal(err)
	}
	// A lower bound only: latency must be added; how much more is the machine's business.
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Errorf("call took %s, want at least the 30ms latency", d)
	}
}

// A hung request ends when the client gives up, and Close releases the rest.
func TestHang(t *testing.T) {
	s := newServer(t, daytonatest.WithFaults(daytonatest.Faults{RateHang: 1}))
	c := newClient(t, s, daytonatest.DefaultKey)
	ctx, cancel := context.WithTimeout(c.ctx, 50*time.Millisecond)
	defer cancel()
	_, resp, err := c.api.SandboxAPI.ListSandboxes(ctx).Execute()
	if err == nil || resp != nil {
		t.Fatalf("hung call answered: %v %v", resp, err)
	}

	// A request hung with no client deadline is released by Close.
	done := make(chan error, 1)
	go func() {
		_, _, err := c.api.SandboxAPI.ListSandboxes(c.ctx).Execute()
		done <- err
	}()
	testutil.WaitFor(t, "the second call to arrive", func() bool { return s.Calls()[daytonatest.RouteList] == 2 })
	s.Close()
	select {
	case <-done:
	case <-time.After(pollTimeout):
		t.Fatal("Close did not release a hung request")
	}
}

// A create that allocates the sandbox and the answer is lost.
func TestCreateLostAndHung(t *testing.T) {
	for name, f := range map[string]daytonatest.Faults{
		"lost": {CreateLost: 1},
		"hang": {CreateHang: 1},
	} {
		t.Run(name, func(t *testing.T) {
			s := newServer(t, daytonatest.WithFaults(f))
			c := newClient(t, s, daytonatest.DefaultKey)
			ctx, cancel := context.WithTimeout(c.ctx, 200*time.Millisecond)
			defer cancel()
			req := apiclient.NewCreateSandbox()
			req.SetName("tether-lost")
			req.SetLabels(map[string]string{"tether-intent": "i1"})
			sb, resp, err := c.api.SandboxAPI.CreateSandbox(ctx).CreateSandbox(*req).Execute()
			if err == nil {
				t.Fatalf("create answered %v", sb)
			}
			if name == "lost" && status(resp) != 500 {
				t.Fatalf("status %d, want 500", status(resp))
			}
			all := s.Sandboxes()
			if len(all) != 1 || all[0].Name != "tether-lost" || all[0].Labels["tether-intent"] != "i1" {
				t.Fatalf("sandboxes = %+v, want the allocated one", all)
			}
			got, _, err := c.api.SandboxAPI.GetSandbox(c.ctx, "tether-lost").Execute()
			if err != nil || got.GetId() != all[0].ID {
				t.Fatalf("the allocated sandbox is not found by name: %v", err)
			}
		})
	}
}

// Scripted faults hit exactly the next n calls of their route.
func TestInject(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s, daytonatest.DefaultKey)
	sb := c.create(t, "inj", nil)
	s.FailNext(daytonatest.RouteDelete, 502, 2)
	for i := range 2 {
		if _, resp, _ := c.api.SandboxAPI.DeleteSandbox(c.ctx, sb.GetId()).Execute(); status(resp) != 502 {
			t.Fatalf("delete %d: status %d, want 502", i, status(resp))
		}
	}
	if rec, _ := s.Sandbox(sb.GetId()); rec.DeleteRequested {
		t.Fatal("a failed delete took effect")
	}
	// A lost answer: the delete happens, the caller sees a 500.
	s.Inject(daytonatest.RouteDelete, 1, daytonatest.Scripted{Status: 500, After: true})
	if _, resp, _ := c.api.SandboxAPI.DeleteSandbox(c.ctx, sb.GetId()).Execute(); status(resp) != 500 {
		t.Fatalf("lost delete: status %d, want 500", status(resp))
	}
	if rec, _ := s.Sandbox(sb.GetId()); !rec.DeleteRequested {
		t.Fatal("the lost delete did not take effect")
	}
	if got := s.Calls()[daytonatest.RouteDelete]; got != 3 {
		t.Errorf("delete calls = %d, want 3", got)
	}
}

// Daytona issue #3294: a delete that stays `destroying` for a while.
func TestDestroyingLingers(t *testing.T) {
	clk := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := newServer(t, daytonatest.WithClock(clk.Now), daytonatest.WithCreateDelay(0),
		daytonatest.WithFaults(daytonatest.Faults{Destroying: time.Minute}))
	c := newClient(t, s, daytonatest.DefaultKey)
	sb := c.create(t, "slow-delete", nil)
	if _, _, err := c.api.SandboxAPI.DeleteSandbox(c.ctx, sb.GetId()).Execute(); err != nil {
		t.Fatal(err)
	}
	clk.Add(59 * time.Second)
	got, _, err := c.api.SandboxAPI.GetSandbox(c.ctx, sb.GetId()).Execute()
	if err != nil || got.GetState() != apiclient.SANDBOXSTATE_DESTROYING {
		t.Fatalf("after 59s: %v %v, want still destroying", got.GetState(), err)
	}
	clk.Add(2 * time.Second)
	if _, resp, _ := c.api.SandboxAPI.GetSandbox(c.ctx, sb.GetId()).Execute(); status(resp) != 404 {
		t.Fatalf("after the linger: status %d, want 404", status(resp))
	}
}

// A new sandbox can be made to linger in `starting`, answering 409 meanwhile.
func TestStartingFault(t *testing.T) {
	clk := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := newServer(t, daytonatest.WithClock(clk.Now), daytonatest.WithCreateWait(0),
		daytonatest.WithFaults(daytonatest.Faults{Starting: time.Minute}))
	c := newClient(t, s, daytonatest.DefaultKey)
	sb := c.create(t, "slow-start", nil)
	if sb.GetState() != apiclient.SANDBOXSTATE_CREATING {
		t.Fatalf("state = %s, want creating (no create wait)", sb.GetState())
	}
	clk.Add(time.Second)
	if rec, _ := s.Sandbox(sb.GetId()); rec.State != "starting" {
		t.Fatalf("state = %s, want starting", rec.State)
	}
	if _, resp, _ := c.api.SandboxAPI.DeleteSandbox(c.ctx, sb.GetId()).Execute(); status(resp) != 409 {
		t.Fatalf("delete while starting: %d, want 409", status(resp))
	}
	clk.Add(time.Minute)
	if _, resp, _ := c.api.SandboxAPI.DeleteSandbox(c.ctx, sb.GetId()).Execute(); status(resp) != 200 {
		t.Fatalf("delete once started: %d, want 200", status(resp))
	}
}

// Foreign sandboxes: the same name in another organization, and one with
// other labels in the same organization.
func TestAddSandbox(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s, daytonatest.DefaultKey)
	if _, err := s.AddSandbox("org-2", daytonatest.SeedSandbox{Name: "tether-x", Labels: map[string]string{"tether-owner": "o1"}}); err != nil {
		t.Fatal(err)
	}
	if _, resp, _ := c.api.SandboxAPI.GetSandbox(c.ctx, "tether-x").Execute(); status(resp) != 404 {
		t.Fatalf("another org's sandbox is visible: %d", status(resp))
	}
	stop := 0
	mine, err := s.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Name: "tether-x",
		Labels: map[string]string{"tether-owner": "someone-else"}, AutoStopInterval: &stop})
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := c.api.SandboxAPI.GetSandbox(c.ctx, "tether-x").Execute()
	if err != nil || got.GetId() != mine.ID || got.GetLabels()["tether-owner"] != "someone-else" || got.GetAutoStopInterval() != 0 {
		t.Fatalf("planted sandbox = %+v, %v", got, err)
	}
	if _, err := s.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Name: "tether-x"}); err == nil {
		t.Fatal("a duplicate name was planted")
	}
	// The create path refuses the taken name as well.
	req := apiclient.NewCreateSandbox()
	req.SetName("tether-x")
	if _, resp, _ := c.api.SandboxAPI.CreateSandbox(c.ctx).CreateSandbox(*req).Execute(); status(resp) != 409 {
		t.Fatalf("create over a planted name: %d, want 409", status(resp))
	}
	if n := len(s.Sandboxes()); n != 2 {
		t.Fatalf("%d sandboxes, want 2", n)
	}
}
