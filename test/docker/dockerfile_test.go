//go:build docker

package docker_test

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// TestRootDockerfile builds the repository's Dockerfile as a user would,
// with one change the machine forces: the engine has no registry, so the
// build stage runs on a stand-in for the golang image (GO_IMAGE), made here
// of this machine's Go toolchain (the same version the Dockerfile pins), the
// module cache of this module alone (GOPROXY=off: nothing is fetched), a
// static busybox for the shell, and Debian's CA bundle. It then checks what
// the Dockerfile promises: a static tether as the ENTRYPOINT, the journal's
// directory a volume, the directories' modes, the CA bundle; and that the
// image runs, as root and as --user 1000 with the default paths.
func TestRootDockerfile(t *testing.T) {
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("SKIP: busybox is not installed (Debian: busybox-static): the root Dockerfile was not built")
	}
	goroot := runtime.GOROOT()
	if goroot == "" {
		t.Skip("SKIP: no GOROOT for the stand-in build image")
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.TempDir()

	// The module cache: this module's dependencies only, from the host's
	// cache (no network).
	hostCache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	// The host's cache first holds what the builds needed; go mod download
	// also reads the go.mod of every module in the graph (on a fresh
	// machine, CI's first run: github.com/pborman/getopt's, which
	// oklog/ulid requires and no build needs). Filled here, through the
	// host's own GOPROXY; a no-op once complete.
	fill := exec.Command("go", "mod", "download")
	fill.Dir = repo
	if out, err := fill.CombinedOutput(); err != nil {
		t.Fatalf("go mod download into the host's cache: %v\n%s", err, out)
	}
	modcache := filepath.Join(ctx, "mod")
	dl := exec.Command("go", "mod", "download")
	dl.Dir = repo
	dl.Env = append(os.Environ(), "GOMODCACHE="+modcache, "GOFLAGS=-modcacherw",
		"GOPROXY=file://"+strings.TrimSpace(string(hostCache))+"/cache/download", "GOSUMDB=off")
	if out, err := dl.CombinedOutput(); err != nil {
		t.Fatalf("go mod download into the stand-in's cache: %v\n%s", err, out)
	}

	// The stand-in's file system, in three tars.
	tarDir := func(name, dir, prefix string) {
		t.Helper()
		cmd := exec.Command("tar", "-C", dir, "--owner=0", "--group=0", "--transform", "s,^\\.,"+prefix+",", "-cf", filepath.Join(ctx, name), ".")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("tar %s: %v\n%s", dir, err, out)
		}
	}
	tarDir("go.tar", goroot, "usr/local/go")
	tarDir("mod.tar", modcache, "go/pkg/mod")
	if err := writeBaseTar(filepath.Join(ctx, "base.tar"), busybox); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(modcache); err != nil {
		t.Fatal(err)
	}
	standIn := "tether-test-go:" + testID
	dockerfile := `FROM scratch
ADD base.tar /
ADD go.tar /
ADD mod.tar /
ENV PATH=/usr/local/go/bin:/bin GOPATH=/go HOME=/root GOPROXY=off GOTOOLCHAIN=local
`
	if err := os.WriteFile(filepath.Join(ctx, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := dockerBuild(ctx, standIn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { docker(t, "rmi", "-f", standIn) })

	img := image + "-root"
	build := exec.Command("docker", "build", "--build-arg", "GO_IMAGE="+standIn, "--build-arg", "VERSION=v0.0.0-test", "-t", img, repo)
	build.Env = append(os.Environ(), "DOCKER_BUILDKIT=0")
	out, err := build.CombinedOutput()
	// The classic builder keeps an image per step of the build stage; they
	// hang off the stand-in, which cannot go before them.
	steps := regexp.MustCompile(`(?m)^ ---> ([0-9a-f]{12})$`).FindAllStringSubmatch(string(out), -1)
	t.Cleanup(func() {
		docker(t, "rmi", "-f", img)
		for i := len(steps) - 1; i >= 0; i-- {
			docker(t, "rmi", steps[i][1])
		}
	})
	if err != nil {
		t.Fatalf("docker build of the root Dockerfile: %v\n%s", err, out)
	}

	if got := mustDocker(t, "image", "inspect", "-f", "{{json .Config.Entrypoint}} {{json .Config.Volumes}}", img); got != `["tether","run","--"] {"/var/lib/tether":{}}` {
		t.Errorf("entrypoint and volumes: %s", got)
	}
	modes := exportModes(t, img)
	for path, want := range map[string]string{
		"var/lib/tether/": "dtrwxrwxrwx", "run/tether/": "dtrwxrwxrwx", "tmp/": "dtrwxrwxrwx", // sticky
		"etc/ssl/certs/ca-certificates.crt": "-rw-r--r--", "usr/local/bin/tether": "-rwxr-xr-x",
	} {
		if modes[path] != want {
			t.Errorf("%s: mode %q, want %q", path, modes[path], want)
		}
	}
	if len(modes) != 14 { // the files above and their parents, nothing else
		t.Errorf("the image holds %d entries, want 14: %v", len(modes), modes)
	}
	size := mustDocker(t, "image", "inspect", "-f", "{{.Size}}", img)
	t.Logf("the root Dockerfile's image: %s bytes", size)

	for _, user := range []string{"0", "1000"} {
		c := run(t, img, runOpts{docker: []string{"--user", user}, args: []string{"tether", "version"}})
		if code := c.wait(); code != 0 {
			t.Errorf("--user %s: tether run -- tether version: exit %d; stderr:\n%s", user, code, c.stderr)
		}
		// The version line is on the container's stdout.
		out, _ := docker(t, "logs", c.name)
		if !strings.Contains(out, "v0.0.0-test") {
			t.Errorf("--user %s: version %q, want v0.0.0-test (the build's VERSION)", user, out)
		}
	}
}

// writeBaseTar: busybox as /bin/sh, mkdir, chmod and cp; Debian's CA
// bundle; /tmp and /root.
func writeBaseTar(path, busybox string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	data, err := os.ReadFile(busybox)
	if err != nil {
		return err
	}
	bundle, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil {
		return err
	}
	for _, d := range []struct {
		name string
		mode int64
	}{{"bin/", 0o755}, {"tmp/", 0o1777}, {"root/", 0o700}, {"etc/", 0o755}, {"etc/ssl/", 0o755}, {"etc/ssl/certs/", 0o755}} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d.name, Mode: d.mode}); err != nil {
			return err
		}
	}
	for _, file := range []struct {
		name string
		data []byte
		mode int64
	}{{"bin/busybox", data, 0o755}, {"etc/ssl/certs/ca-certificates.crt", bundle, 0o644}} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: file.name, Mode: file.mode, Size: int64(len(file.data))}); err != nil {
			return err
		}
		if _, err := tw.Write(file.data); err != nil {
			return err
		}
	}
	for _, l := range []string{"sh", "mkdir", "chmod", "cp"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + l, Linkname: "busybox"}); err != nil {
			return err
		}
	}
	return tw.Close()
}

// exportModes lists an image's file system: path → mode string.
func exportModes(t *testing.T, img string) map[string]string {
	t.Helper()
	id := mustDocker(t, "create", img)
	defer docker(t, "rm", "-f", "-v", id)
	cmd := exec.Command("docker", "export", id)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	modes := map[string]string{}
	tr := tar.NewReader(out)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		// The engine adds these to every container; they are not the image's.
		switch strings.TrimSuffix(h.Name, "/") {
		case ".dockerenv", "dev", "proc", "sys", "etc/hostname", "etc/hosts", "etc/resolv.conf", "etc/mtab", "dev/console", "dev/pts", "dev/shm":
			continue
		}
		modes[h.Name] = h.FileInfo().Mode().String()
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	return modes
}
