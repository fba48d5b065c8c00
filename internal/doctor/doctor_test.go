package doctor_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tether-run/tether/internal/doctor"
	"github.com/tether-run/tether/internal/dotenv"
	"github.com/tether-run/tether/internal/providers"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

const key = "dtn_doctor_0123456789abcdef0123456789abcdef"

// sim is a simulated Daytona the environment points at, with the
// authenticated throttler's quota set so the answers carry its headers.
func sim(t *testing.T, opts ...daytonatest.Option) *daytonatest.Server {
	t.Helper()
	srv := daytonatest.NewServer(append([]daytonatest.Option{daytonatest.WithRateLimit(daytonatest.ThrottlerAuthenticated, 1000, time.Minute)}, opts...)...)
	t.Cleanup(srv.Close)
	t.Setenv("DAYTONA_API_URL", srv.URL)
	t.Setenv("DAYTONA_SERVER_URL", "")
	t.Setenv("DAYTONA_JWT_TOKEN", "")
	t.Setenv("DAYTONA_API_KEY", key)
	for _, v := range []string{"E2B_API_KEY", "E2B_API_URL", "E2B_DOMAIN"} {
		t.Setenv(v, "") // Daytona's checks alone
	}
	for _, v := range []string{"TETHER_E2B_MAX_TIMEOUT", "TETHER_E2B_PROXY"} {
		t.Setenv(v, "") // tether's own E2B settings: the defaults
	}
	t.Setenv("TETHER_DOCKER", "false") // this machine's engine is docker_test.go's
	return srv
}

func run(t *testing.T, live bool) doctor.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	return doctor.Run(ctx, doctor.Options{Journal: filepath.Join(t.TempDir(), "state", "journal.db"), Live: live, LiveTimeout: 30 * time.Second, CleanupTimeout: 10 * time.Second})
}

func step(t *testing.T, res doctor.Result, name string) doctor.Step {
	t.Helper()
	for _, s := range res.Steps {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no step %q in %+v", name, res.Steps)
	return doctor.Step{}
}

func TestDoctorHealthyAccountLiveRoundTrip(t *testing.T) {
	srv := sim(t)
	srv.AddKey(key, daytonatest.DefaultOrg)
	res := run(t, true)
	if res.Failed() || len(res.LeftBehind) > 0 {
		t.Fatalf("failed: %+v", res)
	}
	for _, want := range []struct{ name, says string }{
		{"credentials", "DAYTONA_API_KEY (dtn_…def"},
		{"api url", srv.URL + " (DAYTONA_API_URL)"},
		{"permissions", "delete:sandboxes, write:sandboxes"},
		{"rate limits", "authenticated"},
		{"live: drain", "confirmed gone"},
		{"live: gone", "404"},
	} {
		s := step(t, res, want.name)
		if s.Verdict != doctor.Pass || !strings.Contains(s.Detail, want.says) {
			t.Errorf("%s: %s %q, want ok saying %q", want.name, s.Verdict, s.Detail, want.says)
		}
	}
	if s := step(t, res, "live: create"); s.Latency <= 0 {
		t.Errorf("create: no latency")
	}
	// The simulator's record: one sandbox, the doctor's, created with the
	// backstop and deleted; nothing else touched.
	sbs := srv.Sandboxes()
	if len(sbs) != 1 {
		t.Fatalf("%d sandboxes on the account, want the round trip's one", len(sbs))
	}
	sb := sbs[0]
	if sb.Labels[doctor.LabelDoctor] != doctor.LabelDoctorValue || sb.AutoStopInterval != providers.DoctorAutoStopMinutes || !sb.DeleteRequested || sb.State != "destroyed" {
		t.Fatalf("the round trip's sandbox: %+v", sb)
	}
	if n := srv.CallsFor(sb.ID)[daytonatest.RouteDelete]; n != 1 {
		t.Fatalf("%d deletes, want the drain's one", n)
	}
}

func TestDoctorKeyWithoutDeletePermission(t *testing.T) {
	srv := sim(t)
	srv.AddKeyWithPermissions(key, daytonatest.DefaultOrg, daytonatest.PermWriteSandboxes)
	res := run(t, true)
	s := step(t, res, "permissions")
	if !res.Failed() || s.Verdict != doctor.Fail || !strings.Contains(s.Detail, "lacks delete:sandboxes") {
		t.Fatalf("permissions: %s %q", s.Verdict, s.Detail)
	}
	// Nothing is tried on the account with a key that could not clean up.
	if step(t, res, "live").Verdict != doctor.Skip || srv.Calls()[daytonatest.RouteCreate] != 0 {
		t.Fatalf("the round trip ran with a key that cannot delete: %+v", res.Steps)
	}
}

func TestDoctorUnreachable(t *testing.T) {
	srv := sim(t)
	srv.Close()
	res := run(t, false)
	s := step(t, res, "api")
	if s.Verdict != doctor.Fail || !strings.Contains(s.Detail, "unreachable") {
		t.Fatalf("api: %s %q", s.Verdict, s.Detail)
	}
}

// TestDoctorCleansUpALostCreate: the create took effect but its answer was
// lost; the round trip fails there, and the cleanup finds the sandbox by
// name and deletes it — judged by the simulator's record.
func TestDoctorCleansUpALostCreate(t *testing.T) {
	srv := sim(t)
	srv.AddKey(key, daytonatest.DefaultOrg)
	srv.Inject(daytonatest.RouteCreate, 1, daytonatest.Scripted{Status: 500, After: true})
	res := run(t, true)
	if !res.Failed() || len(res.LeftBehind) != 0 {
		t.Fatalf("want a failed create, cleaned up: %+v", res)
	}
	if s := step(t, res, "live: cleanup"); s.Verdict != doctor.Pass || !strings.Contains(s.Detail, "confirmed gone") {
		t.Fatalf("cleanup: %s %q", s.Verdict, s.Detail)
	}
	sbs := srv.Sandboxes()
	if len(sbs) != 1 || !sbs[0].DeleteRequested || sbs[0].State != "destroyed" {
		t.Fatalf("the lost create's sandbox: %+v", sbs)
	}
}

// TestDoctorReportsLeftBehind: a sandbox the cleanup cannot confirm gone
// (its destroy holds) is named, not reported clean.
func TestDoctorReportsLeftBehind(t *testing.T) {
	srv := sim(t)
	srv.AddKey(key, daytonatest.DefaultOrg)
	// Every delete is refused: the drain fails, and so does the cleanup.
	srv.Inject(daytonatest.RouteDelete, 1000, daytonatest.Scripted{Status: 503})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	res := doctor.Run(ctx, doctor.Options{Journal: filepath.Join(t.TempDir(), "j.db"), Live: true, LiveTimeout: 5 * time.Second, CleanupTimeout: 3 * time.Second})
	sbs := srv.Sandboxes()
	if len(sbs) != 1 || sbs[0].DeleteRequested {
		t.Fatalf("the test meant one sandbox, never deleted: %+v", sbs)
	}
	if len(res.LeftBehind) != 1 || res.LeftBehind[0] != sbs[0].ID {
		t.Fatalf("left behind %v, want %s", res.LeftBehind, sbs[0].ID)
	}
	if s := step(t, res, "live: cleanup"); s.Verdict != doctor.Fail || !strings.Contains(s.Detail, sbs[0].ID) {
		t.Fatalf("cleanup: %s %q", s.Verdict, s.Detail)
	}
}

// TestDoctorJWT: a JWT with its organization works for the round trip; its
// permissions are not readable (the route takes API keys only), said, not
// failed.
func TestDoctorJWT(t *testing.T) {
	srv := sim(t)
	const jwt = "eyJhbGciOiJIUzI1NiJ9.doctor.0123456789abcdef"
	srv.AddJWT(jwt, daytonatest.DefaultOrg)
	t.Setenv("DAYTONA_API_KEY", "")
	t.Setenv("DAYTONA_JWT_TOKEN", jwt)
	t.Setenv("DAYTONA_ORGANIZATION_ID", daytonatest.DefaultOrg)
	res := run(t, true)
	if res.Failed() {
		t.Fatalf("failed: %+v", res.Steps)
	}
	if s := step(t, res, "credentials"); !strings.Contains(s.Detail, "DAYTONA_JWT_TOKEN") || !strings.Contains(s.Detail, daytonatest.DefaultOrg) {
		t.Errorf("credentials: %q", s.Detail)
	}
	if s := step(t, res, "permissions"); s.Verdict != doctor.Skip {
		t.Errorf("permissions: %s %q", s.Verdict, s.Detail)
	}
	if sbs := srv.Sandboxes(); len(sbs) != 1 || sbs[0].State != "destroyed" {
		t.Fatalf("the round trip's sandbox: %+v", sbs)
	}
}

// TestDoctorReadsDotEnv: the settings come from the .env files tether run
// reads, and the steps say so.
func TestDoctorReadsDotEnv(t *testing.T) {
	srv := sim(t)
	srv.AddKey(key, daytonatest.DefaultOrg)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ".env"), []byte("DAYTONA_API_URL="+srv.URL+"\nDAYTONA_API_KEY="+key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"DAYTONA_API_URL", "DAYTONA_API_KEY", "DAYTONA_SERVER_URL", "DAYTONA_JWT_TOKEN"} {
		os.Unsetenv(v) // sim's t.Setenv restores them
	}
	env, problems := dotenv.Load(dir, "DAYTONA_")
	if len(problems) != 0 {
		t.Fatal(problems)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	res := doctor.Run(ctx, doctor.Options{Journal: filepath.Join(t.TempDir(), "j.db"), Getenv: env.Get, Origin: env.Origin})
	if s := step(t, res, "credentials"); s.Verdict != doctor.Pass || !strings.Contains(s.Detail, "DAYTONA_API_KEY in .env") {
		t.Errorf("credentials: %+v", s)
	}
	if s := step(t, res, "api url"); !strings.Contains(s.Detail, srv.URL) || !strings.Contains(s.Detail, "DAYTONA_API_URL in .env") {
		t.Errorf("api url: %+v", s)
	}
	if res.Failed() {
		t.Errorf("doctor failed with the settings of .env: %+v", res.Steps)
	}
}
