package docker_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tether-run/tether/provider/docker"
)

func TestFindEngineHosts(t *testing.T) {
	for _, tc := range []struct {
		host, network, address, refused string
	}{
		{host: "unix:///var/run/docker.sock", network: "unix", address: "/var/run/docker.sock"},
		{host: "unix:///run/user/1000//podman/podman.sock", network: "unix", address: "/run/user/1000/podman/podman.sock"},
		{host: "tcp://10.0.0.5", network: "tcp", address: "10.0.0.5:2375"},
		{host: "tcp://engine.example:2376", network: "tcp", address: "engine.example:2376"},
		{host: "ssh://me@box", refused: "cannot guard an ssh:// engine"},
		{host: "npipe:////./pipe/docker_engine", refused: "unix:// and tcp://"},
		{host: "unix://relative.sock", refused: "must be absolute"},
		{host: "docker.sock", refused: "not a Docker host"},
		{host: "tcp://h:1/base", refused: "base path"},
	} {
		e, err := docker.FindEngine(envOf(map[string]string{docker.EnvHost: tc.host}))
		if tc.refused != "" {
			if err == nil || !strings.Contains(err.Error(), tc.refused) {
				t.Errorf("%s: %v, want an error saying %q", tc.host, err, tc.refused)
			}
			continue
		}
		if err != nil || e.Network != tc.network || e.Address != tc.address || e.Source != docker.EnvHost {
			t.Errorf("%s: %+v %v", tc.host, e, err)
		}
	}
}

func TestFindEngineTLS(t *testing.T) {
	e, err := docker.FindEngine(envOf(map[string]string{docker.EnvHost: "tcp://h", docker.EnvTLSVerify: "1", docker.EnvCertPath: t.TempDir()}))
	if err != nil || e.TLS == nil || e.TLS.InsecureSkipVerify || e.Address != "h:2376" || !strings.HasPrefix(e.URL(), "https://") {
		t.Fatalf("DOCKER_TLS_VERIFY: %+v %v", e, err)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "cert.pem"), []byte("x"), 0o600)
	if _, err := docker.FindEngine(envOf(map[string]string{docker.EnvHost: "tcp://h", docker.EnvTLSVerify: "1", docker.EnvCertPath: dir})); err == nil {
		t.Fatal("a cert.pem without key.pem must be refused")
	}
}

func TestFindEngineContext(t *testing.T) {
	cfg := t.TempDir()
	sum := sha256.Sum256([]byte("remote"))
	meta := filepath.Join(cfg, "contexts", "meta", hex.EncodeToString(sum[:]))
	if err := os.MkdirAll(meta, 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(meta, "meta.json"), []byte(`{"Name":"remote","Endpoints":{"docker":{"Host":"unix:///tmp/ctx.sock","SkipTLSVerify":false}}}`), 0o600)
	os.WriteFile(filepath.Join(cfg, "config.json"), []byte(`{"auths":{},"currentContext":"remote"}`), 0o600)
	env := map[string]string{docker.EnvConfig: cfg}
	e, err := docker.FindEngine(envOf(env))
	if err != nil || e.Address != "/tmp/ctx.sock" || !strings.Contains(e.Source, "currentContext") {
		t.Fatalf("currentContext: %+v %v", e, err)
	}
	env[docker.EnvContext] = "remote"
	if e, err := docker.FindEngine(envOf(env)); err != nil || !strings.Contains(e.Source, docker.EnvContext) {
		t.Fatalf("DOCKER_CONTEXT: %+v %v", e, err)
	}
	env[docker.EnvContext] = "missing"
	if _, err := docker.FindEngine(envOf(env)); err == nil {
		t.Fatal("a context that does not exist must be an error")
	}
	env[docker.EnvHost] = "unix:///tmp/host.sock"
	if e, err := docker.FindEngine(envOf(env)); err != nil || e.Address != "/tmp/host.sock" {
		t.Fatalf("DOCKER_HOST outranks every context: %+v %v", e, err)
	}
}

func TestFindEngineNone(t *testing.T) {
	if _, err := os.Stat("/var/run/docker.sock"); err == nil {
		t.Skip("this machine has the default socket")
	}
	_, err := docker.FindEngine(envOf(map[string]string{docker.EnvConfig: t.TempDir()}))
	if !errors.Is(err, docker.ErrNoEngine) {
		t.Fatalf("%v, want ErrNoEngine", err)
	}
}

func TestChildEnv(t *testing.T) {
	env := strings.Join(docker.ChildEnv("/run/t/d.sock"), " ")
	for _, want := range []string{"DOCKER_HOST=unix:///run/t/d.sock", "DOCKER_TLS_VERIFY= ", "DOCKER_CERT_PATH="} {
		if !strings.Contains(env+" ", want) {
			t.Errorf("child env %q lacks %q", env, want)
		}
	}
}
