package doctor_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tether-run/tether/provider/docker/dockertest"
)

// dockerEnv is the environment of a doctor that names Docker alone, over
// the process's (Daytona's and E2B's unset).
func dockerEnv(t *testing.T, env map[string]string) map[string]string {
	t.Helper()
	for _, v := range []string{"DAYTONA_API_KEY", "DAYTONA_API_URL", "DAYTONA_SERVER_URL", "DAYTONA_JWT_TOKEN", "DAYTONA_ORGANIZATION_ID", "E2B_API_KEY", "E2B_API_URL", "E2B_DOMAIN", "TETHER_DOCKER", "TETHER_DOCKER_PROXY", "DOCKER_CONTEXT"} {
		if _, ok := env[v]; !ok {
			env[v] = ""
		}
	}
	env["DOCKER_CONFIG"] = t.TempDir() // no context of the user's
	return env
}

// TestDoctorDocker: where the Docker engine tether run would use is, and
// where that came from; that this user may open its socket; what the
// engine is (a Docker 20.10 before 20.10.27 is a warning, Podman is not);
// a setup tether cannot use fails by name; TETHER_DOCKER=false says
// nothing of Docker.
func TestDoctorDocker(t *testing.T) {
	serve := func(flavor dockertest.Flavor) string {
		sim := dockertest.New(flavor)
		dir, err := os.MkdirTemp("", "dd")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		host, err := sim.Listen(filepath.Join(dir, "e.sock"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(sim.Close)
		return host
	}
	docker20, podman := serve(dockertest.Docker), serve(dockertest.Podman)
	for _, c := range []struct {
		name string
		env  map[string]string
		want map[string]string // step → verdict and a part of its detail
	}{
		{"docker 20.10.24", map[string]string{"DOCKER_HOST": docker20}, map[string]string{
			"docker engine": "ok " + docker20 + " (DOCKER_HOST)", "docker socket": "ok may open it",
			"docker api": "warn Engine 20.10.24+dfsg1, API 1.41", "docker settings": "ok --docker-proxy on"}},
		{"podman", map[string]string{"DOCKER_HOST": podman, "TETHER_DOCKER_PROXY": "false"}, map[string]string{
			"docker api": "ok Podman Engine 4.3.1", "docker settings": "ok --docker-proxy off"}},
		{"ssh", map[string]string{"DOCKER_HOST": "ssh://me@far"}, map[string]string{
			"docker engine": "FAIL tether cannot guard an ssh:// engine", "docker api": "skip"}},
		{"nothing there", map[string]string{"DOCKER_HOST": "unix:///nonexistent/docker.sock"}, map[string]string{
			"docker engine": "ok unix:///nonexistent/docker.sock (DOCKER_HOST)", "docker socket": "FAIL is the engine running?", "docker api": "skip"}},
		{"a bad setting", map[string]string{"DOCKER_HOST": docker20, "TETHER_DOCKER_PROXY": "maybe"}, map[string]string{
			"docker settings": "FAIL TETHER_DOCKER_PROXY"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := runE2B(t, false, dockerEnv(t, c.env))
			for name, want := range c.want {
				verdict, detail, _ := strings.Cut(want, " ")
				s := step(t, res, name)
				if string(s.Verdict) != verdict || !strings.Contains(s.Detail, detail) {
					t.Errorf("%s: %s %q, want %s and %q", name, s.Verdict, s.Detail, verdict, detail)
				}
			}
		})
	}
	res := runE2B(t, false, dockerEnv(t, map[string]string{"DOCKER_HOST": docker20, "TETHER_DOCKER": "false"}))
	for _, s := range res.Steps {
		if strings.HasPrefix(s.Name, "docker") {
			t.Errorf("TETHER_DOCKER=false, yet a step %q", s.Name)
		}
	}
}
