package examples_test

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v4"

	"github.com/tether-run/tether/internal/config"
)

// What a fleet of runners depends on in Kubernetes, checked on every
// workload of examples/kubernetes that runs `tether run`
// (kubernetes/README.md, "What a fleet depends on"): the grace period
// covers tether's whole budget; no preStop stands before tether's SIGTERM;
// a journal on an emptyDir (gone with the pod) comes with the lease; a
// tether that serves metrics names the port the scrape discovers and
// lingers for the drain's last scrape.

// defaultTerminationGrace is Kubernetes' terminationGracePeriodSeconds
// when a pod sets none.
const defaultTerminationGrace = 30 * time.Second

// scrapeInterval is examples/prometheus/prometheus.yml's.
const scrapeInterval = 15 * time.Second

// runnerPod is what the checks read of a pod template.
type runnerPod struct {
	TerminationGracePeriodSeconds *int `yaml:"terminationGracePeriodSeconds"`
	Containers                    []struct {
		Name    string   `yaml:"name"`
		Command []string `yaml:"command"`
		Env     []struct {
			Name  string `yaml:"name"`
			Value string `yaml:"value"`
		} `yaml:"env"`
		Ports []struct {
			Name          string `yaml:"name"`
			ContainerPort int    `yaml:"containerPort"`
		} `yaml:"ports"`
		VolumeMounts []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
		} `yaml:"volumeMounts"`
		Lifecycle *struct {
			PreStop any `yaml:"preStop"`
		} `yaml:"lifecycle"`
	} `yaml:"containers"`
	Volumes []struct {
		Name                  string `yaml:"name"`
		EmptyDir              any    `yaml:"emptyDir"`
		PersistentVolumeClaim any    `yaml:"persistentVolumeClaim"`
	} `yaml:"volumes"`
	// claims: a StatefulSet's volumeClaimTemplates, by name.
	claims map[string]bool
}

// runnerPods returns the pod templates of path's workloads, by a name for
// the test, with a StatefulSet's claim templates.
func runnerPods(t *testing.T, path string) map[string]runnerPod {
	t.Helper()
	out := map[string]runnerPod{}
	for _, obj := range readManifests(t, path) {
		var raw map[string]any
		if err := obj.Spec.Decode(&raw); err != nil {
			t.Fatal(err)
		}
		tmpl := raw
		switch obj.Kind {
		case "Pod":
		case "CronJob":
			continue // tether sweep: no drain
		default:
			tmpl, _ = raw["template"].(map[string]any)
			tmpl, _ = tmpl["spec"].(map[string]any)
		}
		b, err := yaml.Marshal(tmpl)
		if err != nil {
			t.Fatal(err)
		}
		var rp runnerPod
		if err := yaml.Unmarshal(b, &rp); err != nil {
			t.Fatal(err)
		}
		rp.claims = map[string]bool{}
		if vcts, ok := raw["volumeClaimTemplates"].([]any); ok {
			for _, v := range vcts {
				if m, ok := v.(map[string]any)["metadata"].(map[string]any); ok {
					rp.claims[fmt.Sprint(m["name"])] = true
				}
			}
		}
		out[filepath.Base(path)+"/"+obj.Kind+"/"+obj.Metadata.Name] = rp
	}
	return out
}

// factViolations lists what a runner pod gets wrong. A container runs
// tether run when it keeps the image's entrypoint (tether run --, the
// images of this repository) or names it as its command.
func factViolations(rp runnerPod) []string {
	var bad []string
	grace := defaultTerminationGrace
	if rp.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*rp.TerminationGracePeriodSeconds) * time.Second
	}
	for _, c := range rp.Containers {
		if len(c.Command) > 0 && !(len(c.Command) > 1 && c.Command[0] == "tether" && c.Command[1] == "run") {
			continue
		}
		say := func(format string, a ...any) { bad = append(bad, "container "+c.Name+": "+fmt.Sprintf(format, a...)) }
		env := map[string]string{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
		dur := func(name string, def time.Duration) time.Duration {
			v, ok := env[name]
			if !ok {
				return def
			}
			d, err := time.ParseDuration(v)
			if err != nil {
				say("%s=%q: not a duration", name, v)
			}
			return d
		}
		budget := dur(config.EnvGrace, config.DefaultGrace) + dur(config.EnvDrainTimeout, config.DefaultDrainTimeout) + dur(config.EnvMetricsLinger, 0)
		if grace < budget+margin {
			say("terminationGracePeriodSeconds %s < tether's budget %s (grace + drain timeout + metrics linger) + %s: the SIGKILL would cut the drain", grace, budget, margin)
		}
		if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
			say("a preStop hook: tether, the entrypoint, gets the SIGTERM first without one, and the hook's time comes out of the grace period")
		}
		// The journal's volume.
		journal := env[config.EnvJournal]
		vol, best := "", ""
		for _, m := range c.VolumeMounts {
			if strings.HasPrefix(journal, strings.TrimSuffix(m.MountPath, "/")+"/") && len(m.MountPath) > len(best) {
				vol, best = m.Name, m.MountPath
			}
		}
		kept := rp.claims[vol]
		for _, v := range rp.Volumes {
			if v.Name == vol && v.PersistentVolumeClaim != nil {
				kept = true
			}
		}
		if lease, _ := strconv.Atoi(env[config.EnvLease]); !kept && lease < 1 {
			say("the journal (%s) is on volume %q, which does not outlive the pod, and %s is not set: what the drain leaves has no replay and no lease", journal, vol, config.EnvLease)
		}
		// Metrics for the fleet's alerts.
		if addr := env[config.EnvMetricsAddr]; addr != "" {
			_, port, _ := net.SplitHostPort(addr)
			named := false
			for _, p := range c.Ports {
				if p.Name == "tether-metrics" && strconv.Itoa(p.ContainerPort) == port {
					named = true
				}
			}
			if !named {
				say("%s=%s but no container port %s named tether-metrics (what examples/prometheus discovers)", config.EnvMetricsAddr, addr, port)
			}
			if l := dur(config.EnvMetricsLinger, 0); l < 2*scrapeInterval {
				say("%s %s < twice the scrape interval (%s): the drain's last values may never be scraped (no TetherSandboxesLeftLive)", config.EnvMetricsLinger, l, scrapeInterval)
			}
		}
	}
	return bad
}

// TestRunnerWorkloadsFitAFleet: every runner workload of
// examples/kubernetes passes the checks above, and the checks refuse what
// they are there to refuse.
func TestRunnerWorkloadsFitAFleet(t *testing.T) {
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		for name, rp := range runnerPods(t, f) {
			n++
			for _, v := range factViolations(rp) {
				t.Errorf("%s: %s", name, v)
			}
		}
	}
	if n < 2 {
		t.Fatalf("%d runner workloads, want the pod and the StatefulSet", n)
	}

	pod := runnerPods(t, "kubernetes/pod.yaml")["pod.yaml/Pod/agent-runner"]
	sts := runnerPods(t, "kubernetes/statefulset.yaml")["statefulset.yaml/StatefulSet/agent-runners"]
	if len(pod.Containers) != 1 || len(sts.Containers) != 1 || !sts.claims["tether-journal"] {
		t.Fatalf("pod %+v, StatefulSet %+v: want one container each and the StatefulSet's journal claim", pod, sts)
	}
	setEnv := func(rp *runnerPod, name, value string) {
		c := &rp.Containers[0]
		for i := range c.Env {
			if c.Env[i].Name == name {
				c.Env[i].Value = value
				return
			}
		}
		c.Env = append(c.Env, struct {
			Name  string `yaml:"name"`
			Value string `yaml:"value"`
		}{name, value})
	}
	for name, mutate := range map[string]func(){
		"a grace period shorter than the drain": func() { ten := 7; pod.TerminationGracePeriodSeconds = &ten },
		"the default grace period under a long drain": func() {
			pod.TerminationGracePeriodSeconds = nil
			setEnv(&pod, config.EnvDrainTimeout, "40s")
		},
		"a linger the grace period does not cover": func() { setEnv(&pod, config.EnvMetricsLinger, "30s") },
		"a preStop hook": func() {
			pod.Containers[0].Lifecycle = &struct {
				PreStop any `yaml:"preStop"`
			}{PreStop: map[string]any{"sleep": map[string]any{"seconds": 5}}}
		},
		"an emptyDir journal without the lease": func() { setEnv(&pod, config.EnvLease, "0") },
		"metrics without the named port":        func() { setEnv(&pod, config.EnvMetricsAddr, ":9464") },
		"metrics that do not linger":            func() { setEnv(&sts, config.EnvMetricsLinger, "5s") },
		"metrics on another port than the named one": func() {
			setEnv(&sts, config.EnvMetricsAddr, ":9100")
		},
	} {
		pod = runnerPods(t, "kubernetes/pod.yaml")["pod.yaml/Pod/agent-runner"]
		sts = runnerPods(t, "kubernetes/statefulset.yaml")["statefulset.yaml/StatefulSet/agent-runners"]
		mutate()
		if len(factViolations(pod))+len(factViolations(sts)) == 0 {
			t.Errorf("%s: not refused", name)
		}
	}
	// A claim keeps the journal: the StatefulSet needs no lease for the
	// check (it sets one for a node that stops answering).
	sts = runnerPods(t, "kubernetes/statefulset.yaml")["statefulset.yaml/StatefulSet/agent-runners"]
	setEnv(&sts, config.EnvLease, "0")
	if v := factViolations(sts); len(v) != 0 {
		t.Errorf("a journal on a claim without the lease: %v", v)
	}
}
