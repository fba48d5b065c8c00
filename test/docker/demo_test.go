//go:build docker

package docker_test

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tether-run/tether/internal/providers"
)

// TestDemoDocker: `tether demo docker` tells the story on this machine's
// engine and exits 0; judged by the engine's own events, not the story's
// table: each of the 2×3 containers the demo created (carrying its
// label) was destroyed, nothing of the demo's is left (containers, the
// image it built), and the containers it did not make — one carrying
// another telling's demo label, one with none of tether's — are
// untouched.
func TestDemoDocker(t *testing.T) {
	tetherBin := tether(t)
	img := sandboxImage(t)
	other := mustDocker(t, "run", "-d", "--label", providers.LabelDemo+"=someone-else", "--label", "tether-test="+testID, img, "sleep", "1000")
	plain := mustDocker(t, "run", "-d", "--label", "tether-test="+testID, img, "sleep", "1000")
	t.Cleanup(func() { docker(t, "rm", "-f", other, plain) })
	images := demoImages(t)

	since := time.Now().Add(-time.Second).Unix()
	ctx, cancel := context.WithTimeout(context.Background(), 4*waitBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, tetherBin, "demo", "docker", "--sandboxes", "3")
	cmd.Dir = t.TempDir()
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TETHER_") && !strings.HasPrefix(kv, "DOCKER_") && !strings.HasPrefix(kv, "DAYTONA_") && !strings.HasPrefix(kv, "E2B_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tether demo docker: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "every sandbox ended confirmed gone") {
		t.Fatalf("the story does not end confirmed gone:\n%s", out)
	}
	until := time.Now().Add(time.Second).Unix()

	// The engine's own account of the demo's containers (a sandbox
	// carries tether's name; the image's build made one without).
	events := mustDocker(t, "events", "--since", strconv.FormatInt(since, 10), "--until", strconv.FormatInt(until, 10), "--filter", "type=container",
		"--filter", "label="+providers.LabelDemo, "--format", `{{.Action}} {{.Actor.ID}} {{index .Actor.Attributes "`+providers.LabelDemo+`"}} {{index .Actor.Attributes "tether-name"}}`)
	created, destroyed := map[string]bool{}, map[string]bool{}
	for _, l := range strings.Split(events, "\n") {
		f := strings.Fields(l)
		if len(f) != 4 || f[2] == "someone-else" {
			continue // the other telling's; the builder's own (no tether-name)
		}
		switch f[0] {
		case "create":
			created[f[1]] = true
		case "destroy":
			destroyed[f[1]] = true
		}
	}
	if len(created) != 6 {
		t.Errorf("the engine saw %d containers of the demo created, want 6:\n%s\n%s", len(created), events, out)
	}
	for id := range created {
		if !destroyed[id] {
			t.Errorf("container %s of the demo was never destroyed by the engine's events", id)
		}
	}
	if left := mustDocker(t, "ps", "-aq", "--filter", "label="+providers.LabelDemo); strings.TrimSpace(left) != other[:12] {
		t.Errorf("containers with a demo label left: %q, want only the other telling's %s", left, other[:12])
	}
	for _, id := range []string{other, plain} {
		if st := mustDocker(t, "inspect", "-f", "{{.State.Status}}", id); st != "running" {
			t.Errorf("a container the demo did not make is %s, want running", st)
		}
	}
	if got := demoImages(t); got != images {
		t.Errorf("the demo's images: %q before, %q after: it left its image", images, got)
	}
}

// demoImages lists the images `tether demo docker` builds.
func demoImages(t *testing.T) string {
	return mustDocker(t, "images", "-q", "--filter", "label="+providers.LabelDemo)
}
