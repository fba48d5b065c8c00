//go:build docker

package docker_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestDoctorLiveDocker: `tether doctor --live` on this machine's engine,
// named by nothing but its default socket: every Docker check passes (the
// 20.10.24 engine's version is a warning), the round trip creates one
// container and confirms it gone; judged by the engine's events (one
// container with the round trip's label created and destroyed), and
// nothing of the round trip's left (its container, its image). A
// container carrying the same label that the doctor did not make is
// untouched.
func TestDoctorLiveDocker(t *testing.T) {
	tetherBin := tether(t)
	img := sandboxImage(t)
	const label = "purpose=tether-doctor"
	other := mustDocker(t, "run", "-d", "--label", label, "--label", "tether-test="+testID, img, "sleep", "1000")
	t.Cleanup(func() { docker(t, "rm", "-f", other) })

	since := time.Now().Add(-time.Second).Unix()
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, tetherBin, "doctor", "--live")
	cmd.Dir = t.TempDir()
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TETHER_") && !strings.HasPrefix(kv, "DOCKER_") && !strings.HasPrefix(kv, "DAYTONA_") && !strings.HasPrefix(kv, "E2B_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "TETHER_JOURNAL="+filepath.Join(cmd.Dir, "journal.db"), "DOCKER_CONFIG="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tether doctor --live: %v\n%s", err, out)
	}
	for _, want := range []string{"ok    docker engine", "(default)", "ok    docker socket", "docker api", "ok    docker live: create", "ok    docker live: drain", "ok    docker live: gone", "a sandbox was created, drained and confirmed gone"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	until := time.Now().Add(time.Second).Unix()
	events := mustDocker(t, "events", "--since", strconv.FormatInt(since, 10), "--until", strconv.FormatInt(until, 10),
		"--filter", "type=container", "--filter", "label="+label, "--format", `{{.Action}} {{.Actor.ID}} {{index .Actor.Attributes "tether-name"}}`)
	created, destroyed := map[string]bool{}, map[string]bool{}
	for _, l := range strings.Split(events, "\n") {
		f := strings.Fields(l)
		if len(f) != 3 {
			continue // the planted one (no tether-name); the image build's
		}
		switch f[0] {
		case "create":
			created[f[1]] = true
		case "destroy":
			destroyed[f[1]] = true
		}
	}
	if len(created) != 1 || len(destroyed) != 1 {
		t.Errorf("the engine saw %d round-trip containers created and %d destroyed, want 1 and 1:\n%s", len(created), len(destroyed), events)
	}
	if left := mustDocker(t, "ps", "-aq", "--no-trunc", "--filter", "label="+label); left != other {
		t.Errorf("containers labelled %s: %q, want only the planted %s", label, left, other)
	}
	if imgs := mustDocker(t, "images", "-q", "--filter", "label="+label); imgs != "" {
		t.Errorf("the round trip's image is left: %s", imgs)
	}
}
