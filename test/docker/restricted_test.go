//go:build docker

package docker_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"
)

// TestPodRestrictedOnDocker runs the image as examples/kubernetes/pod.yaml
// has a cluster run it, on the Docker engine: its uid, a read-only root,
// every capability dropped, no privilege escalation (seccomp is Docker's
// default profile), each emptyDir a tmpfs of the same mode (0777), and the
// TETHER_* variables of the manifest. tether must serve the runner, answer
// `docker exec C tether intent ls` with no flag, and drain on docker stop.
func TestPodRestrictedOnDocker(t *testing.T) {
	const sandboxes = 5
	b, err := os.ReadFile("../../examples/kubernetes/pod.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var pod struct {
		Spec struct {
			SecurityContext struct {
				RunAsUser  int `yaml:"runAsUser"`
				RunAsGroup int `yaml:"runAsGroup"`
			} `yaml:"securityContext"`
			Containers []struct {
				Env []struct {
					Name  string `yaml:"name"`
					Value string `yaml:"value"`
				} `yaml:"env"`
				VolumeMounts []struct {
					Name      string `yaml:"name"`
					MountPath string `yaml:"mountPath"`
				} `yaml:"volumeMounts"`
			} `yaml:"containers"`
			Volumes []struct {
				Name     string         `yaml:"name"`
				EmptyDir map[string]any `yaml:"emptyDir"`
			} `yaml:"volumes"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(b, &pod); err != nil {
		t.Fatal(err)
	}
	if len(pod.Spec.Containers) != 1 || pod.Spec.SecurityContext.RunAsUser == 0 {
		t.Fatalf("pod.yaml: want one container and a non-root uid: %+v", pod.Spec)
	}
	c0 := pod.Spec.Containers[0]
	emptyDirs := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		if v.EmptyDir != nil {
			emptyDirs[v.Name] = true
		}
	}
	opts := []string{"--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
		"--user", fmt.Sprintf("%d:%d", pod.Spec.SecurityContext.RunAsUser, pod.Spec.SecurityContext.RunAsGroup)}
	for _, m := range c0.VolumeMounts {
		if !emptyDirs[m.Name] {
			t.Fatalf("volume %s is not an emptyDir; this test knows only those", m.Name)
		}
		opts = append(opts, "--tmpfs", m.MountPath+":mode=0777")
	}
	w := newWorld(t)
	env := w.env()
	for _, e := range c0.Env {
		if strings.HasPrefix(e.Name, "TETHER_") {
			env = append(env, e.Name+"="+e.Value)
		}
	}
	c := run(t, image, runOpts{docker: opts, env: env, args: []string{"runner", "--sandboxes", fmt.Sprint(sandboxes), "--label", "restricted"}})
	if got := len(created(c.ready())); got != sandboxes {
		t.Fatalf("the runner created %d sandboxes, want %d; stderr:\n%s", got, sandboxes, c.stderr)
	}
	out, err := c.exec(nil, "tether", "intent", "ls")
	if err != nil {
		t.Fatalf("docker exec tether intent ls: %v\n%s", err, out)
	}
	if n := strings.Count(out, `"state":"observed"`); n != sandboxes {
		t.Errorf("tether intent ls: %d observed, want %d:\n%s", n, sandboxes, out)
	}
	if _, code := c.stop(); code != exitTERM {
		t.Errorf("exit %d, want %d; stderr:\n%s", code, exitTERM, c.stderr)
	}
	w.assertAllDestroyed("restricted", sandboxes)
}
