package examples_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"

	"github.com/tether-run/tether/internal/config"
)

// The Kubernetes manifests must be admitted where the "restricted" Pod
// Security Standard is enforced, and tether must work in them with a
// read-only root file system. No cluster runs here: this is the admission
// check written out, field by field, from the standard's "restricted"
// profile (which includes "baseline"), at
// https://kubernetes.io/docs/concepts/security/pod-security-standards/.

// k8s mirrors the few parts of the API objects the checks read; unknown
// fields are ignored, as in a partial schema.
type k8sObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec yaml.Node `yaml:"spec"`
}

type podSpec struct {
	HostNetwork     bool            `yaml:"hostNetwork"`
	HostPID         bool            `yaml:"hostPID"`
	HostIPC         bool            `yaml:"hostIPC"`
	SecurityContext podSecurity     `yaml:"securityContext"`
	InitContainers  []containerSpec `yaml:"initContainers"`
	Containers      []containerSpec `yaml:"containers"`
	Volumes         []map[string]any
}

type podSecurity struct {
	RunAsNonRoot   *bool           `yaml:"runAsNonRoot"`
	RunAsUser      *int64          `yaml:"runAsUser"`
	SeccompProfile *seccompProfile `yaml:"seccompProfile"`
	Sysctls        []any           `yaml:"sysctls"`
}

type seccompProfile struct {
	Type string `yaml:"type"`
}

type containerSpec struct {
	Name            string `yaml:"name"`
	Command         []string
	Args            []string
	SecurityContext struct {
		Privileged               *bool           `yaml:"privileged"`
		AllowPrivilegeEscalation *bool           `yaml:"allowPrivilegeEscalation"`
		RunAsNonRoot             *bool           `yaml:"runAsNonRoot"`
		RunAsUser                *int64          `yaml:"runAsUser"`
		ReadOnlyRootFilesystem   *bool           `yaml:"readOnlyRootFilesystem"`
		SeccompProfile           *seccompProfile `yaml:"seccompProfile"`
		ProcMount                string          `yaml:"procMount"`
		Capabilities             struct {
			Add  []string `yaml:"add"`
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
	Ports []struct {
		HostPort int `yaml:"hostPort"`
	} `yaml:"ports"`
	Env []struct {
		Name  string `yaml:"name"`
		Value string `yaml:"value"`
	} `yaml:"env"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		ReadOnly  bool   `yaml:"readOnly"`
	} `yaml:"volumeMounts"`
}

// restrictedVolumes are the volume types the restricted profile allows.
var restrictedVolumes = []string{"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}

// podSpecsOf finds the pod template of each object: a Pod's spec, a Job's
// or a workload's spec.template.spec, a CronJob's
// spec.jobTemplate.spec.template.spec.
func podSpecsOf(t *testing.T, obj k8sObject) podSpec {
	t.Helper()
	var path []string
	switch obj.Kind {
	case "Pod":
	case "Job", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet":
		path = []string{"template", "spec"}
	case "CronJob":
		path = []string{"jobTemplate", "spec", "template", "spec"}
	default:
		t.Fatalf("%s %s: not a kind this check knows", obj.Kind, obj.Metadata.Name)
	}
	var raw any
	if err := obj.Spec.Decode(&raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range path {
		m, ok := raw.(map[string]any)
		if !ok || m[k] == nil {
			t.Fatalf("%s %s: no spec.%s", obj.Kind, obj.Metadata.Name, strings.Join(path, "."))
		}
		raw = m[k]
	}
	b, err := yaml.Marshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	var ps podSpec
	if err := yaml.Unmarshal(b, &ps); err != nil {
		t.Fatal(err)
	}
	return ps
}

// restrictedViolations lists what the restricted profile refuses in ps.
func restrictedViolations(ps podSpec) []string {
	var bad []string
	if ps.HostNetwork || ps.HostPID || ps.HostIPC {
		bad = append(bad, "host namespaces")
	}
	if len(ps.SecurityContext.Sysctls) > 0 {
		bad = append(bad, "sysctls (only a safe set is allowed; this check allows none)")
	}
	for _, v := range ps.Volumes {
		for k := range v {
			if k != "name" && !slices.Contains(restrictedVolumes, k) {
				bad = append(bad, fmt.Sprintf("volume %v: type %s", v["name"], k))
			}
		}
	}
	if ps.SecurityContext.RunAsUser != nil && *ps.SecurityContext.RunAsUser == 0 {
		bad = append(bad, "pod runAsUser 0")
	}
	if len(ps.Containers) == 0 {
		bad = append(bad, "no containers")
	}
	for _, c := range append(append([]containerSpec{}, ps.InitContainers...), ps.Containers...) {
		sc := c.SecurityContext
		say := func(format string, a ...any) { bad = append(bad, "container "+c.Name+": "+fmt.Sprintf(format, a...)) }
		if sc.Privileged != nil && *sc.Privileged {
			say("privileged")
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			say("allowPrivilegeEscalation must be false")
		}
		nonRoot := sc.RunAsNonRoot
		if nonRoot == nil {
			nonRoot = ps.SecurityContext.RunAsNonRoot
		}
		if nonRoot == nil || !*nonRoot {
			say("runAsNonRoot must be true (pod or container)")
		}
		uid := sc.RunAsUser
		if uid == nil {
			uid = ps.SecurityContext.RunAsUser
		}
		if uid == nil {
			// Allowed by the standard, but then the image's USER decides;
			// tether's image has none, so the manifest must give one.
			say("no runAsUser: the image's user would be root")
		} else if *uid == 0 {
			say("runAsUser 0")
		}
		seccomp := sc.SeccompProfile
		if seccomp == nil {
			seccomp = ps.SecurityContext.SeccompProfile
		}
		if seccomp == nil || (seccomp.Type != "RuntimeDefault" && seccomp.Type != "Localhost") {
			say("seccompProfile.type must be RuntimeDefault or Localhost (pod or container)")
		}
		if !slices.Contains(sc.Capabilities.Drop, "ALL") {
			say("capabilities.drop must contain ALL")
		}
		for _, a := range sc.Capabilities.Add {
			if a != "NET_BIND_SERVICE" {
				say("capability %s added", a)
			}
		}
		if sc.ProcMount != "" && sc.ProcMount != "Default" {
			say("procMount %s", sc.ProcMount)
		}
		for _, p := range c.Ports {
			if p.HostPort != 0 {
				say("hostPort %d", p.HostPort)
			}
		}
	}
	return bad
}

func readManifests(t *testing.T, path string) []k8sObject {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var objs []k8sObject
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var o k8sObject
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if o.Kind == "" || o.APIVersion == "" || o.Metadata.Name == "" {
			t.Fatalf("%s: a document without apiVersion, kind or metadata.name", path)
		}
		objs = append(objs, o)
	}
	return objs
}

// TestKubernetesManifestsAreRestricted: every pod template of
// examples/kubernetes passes the restricted profile and has a read-only
// root file system.
func TestKubernetesManifestsAreRestricted(t *testing.T) {
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) < 3 {
		t.Fatalf("manifests: %v %v, want the pod, the StatefulSet and the sweep CronJob", files, err)
	}
	for _, f := range files {
		for _, obj := range readManifests(t, f) {
			t.Run(f+"/"+obj.Kind, func(t *testing.T) {
				ps := podSpecsOf(t, obj)
				for _, v := range restrictedViolations(ps) {
					t.Errorf("refused by the restricted profile: %s", v)
				}
				for _, c := range ps.Containers {
					if ro := c.SecurityContext.ReadOnlyRootFilesystem; ro == nil || !*ro {
						t.Errorf("container %s: readOnlyRootFilesystem is not true", c.Name)
					}
				}
			})
		}
	}
}

// TestRestrictedCheckRefuses: the check above refuses what the profile
// refuses (a check that passes everything proves nothing).
func TestRestrictedCheckRefuses(t *testing.T) {
	good := readManifests(t, "kubernetes/pod.yaml")[0]
	base := podSpecsOf(t, good)
	if v := restrictedViolations(base); len(v) != 0 {
		t.Fatalf("pod.yaml: %v", v)
	}
	f, tr := false, true
	root := int64(0)
	for name, mutate := range map[string]func(*podSpec){
		"escalation allowed": func(p *podSpec) { p.Containers[0].SecurityContext.AllowPrivilegeEscalation = &tr },
		"escalation unset":   func(p *podSpec) { p.Containers[0].SecurityContext.AllowPrivilegeEscalation = nil },
		"capabilities kept":  func(p *podSpec) { p.Containers[0].SecurityContext.Capabilities.Drop = nil },
		"capability added":   func(p *podSpec) { p.Containers[0].SecurityContext.Capabilities.Add = []string{"SYS_ADMIN"} },
		"no seccomp":         func(p *podSpec) { p.SecurityContext.SeccompProfile = nil },
		"unconfined seccomp": func(p *podSpec) { p.SecurityContext.SeccompProfile = &seccompProfile{Type: "Unconfined"} },
		"root allowed":       func(p *podSpec) { p.SecurityContext.RunAsNonRoot = &f },
		"uid 0":              func(p *podSpec) { p.SecurityContext.RunAsUser = &root },
		"privileged":         func(p *podSpec) { p.Containers[0].SecurityContext.Privileged = &tr },
		"host network":       func(p *podSpec) { p.HostNetwork = true },
		"hostPath volume": func(p *podSpec) {
			p.Volumes = append(p.Volumes, map[string]any{"name": "h", "hostPath": map[string]any{"path": "/"}})
		},
		"host port": func(p *podSpec) {
			p.Containers[0].Ports = append(p.Containers[0].Ports, struct {
				HostPort int `yaml:"hostPort"`
			}{80})
		},
	} {
		p := podSpecsOf(t, good) // a fresh copy
		mutate(&p)
		if v := restrictedViolations(p); len(v) == 0 {
			t.Errorf("%s: not refused", name)
		}
	}
}

// TestRunnerPodPathsOnVolumes: with a read-only root, everything tether
// writes must be on a volume the container mounts writable: the journal,
// and the socket and spool directories, each in a directory tether creates
// (0700) inside the mount (it refuses an emptyDir's own 0777 directory for
// any of them).
func TestRunnerPodPathsOnVolumes(t *testing.T) {
	for _, f := range []string{"kubernetes/pod.yaml", "kubernetes/statefulset.yaml"} {
		t.Run(f, func(t *testing.T) { runnerPathsOnVolumes(t, podSpecsOf(t, readManifests(t, f)[0])) })
	}
}

func runnerPathsOnVolumes(t *testing.T, ps podSpec) {
	c := ps.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	mountOf := func(path string) string {
		best := ""
		for _, m := range c.VolumeMounts {
			if !m.ReadOnly && strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") && len(m.MountPath) > len(best) {
				best = m.MountPath
			}
		}
		return best
	}
	for _, name := range []string{config.EnvJournal, config.EnvSocket, config.EnvSpool} {
		path := env[name]
		if path == "" {
			t.Errorf("%s is not set: tether's default falls back to a path on the read-only root", name)
			continue
		}
		m := mountOf(path)
		if m == "" {
			t.Errorf("%s=%s is on no writable volume", name, path)
			continue
		}
		dir := path
		if name != config.EnvSpool {
			dir = filepath.Dir(path)
		}
		if filepath.Clean(dir) == filepath.Clean(m) {
			t.Errorf("%s=%s: its directory is the mount %s itself (mode 0777, refused); use a directory inside it", name, path, m)
		}
	}
	if m := mountOf(env[config.EnvJournal]); m != config.StateDir {
		t.Errorf("the journal is on %q, want the volume at %s (the examples' and docs' path)", m, config.StateDir)
	}
}

// The part of the Kubernetes API the manifests use, with the API's field
// names (core/v1 Pod, batch/v1 CronJob and Job). Loaded with
// WithKnownFields, a field not listed here is refused: a misspelt
// `allowPrivilegeEscalaton` would otherwise be ignored by this test and by
// a lenient apply, and the pod would run without it. A field the manifests
// start to use is added here.
type strictObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name      string            `yaml:"name"`
		Namespace string            `yaml:"namespace"`
		Labels    map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec yaml.Node `yaml:"spec"`
}

type strictCronJobSpec struct {
	Schedule          string `yaml:"schedule"`
	ConcurrencyPolicy string `yaml:"concurrencyPolicy"`
	JobTemplate       struct {
		Spec strictJobSpec `yaml:"spec"`
	} `yaml:"jobTemplate"`
}

type strictJobSpec struct {
	BackoffLimit          *int `yaml:"backoffLimit"`
	ActiveDeadlineSeconds *int `yaml:"activeDeadlineSeconds"`
	Template              struct {
		Spec strictPodSpec `yaml:"spec"`
	} `yaml:"template"`
}

type strictStatefulSetSpec struct {
	ServiceName         string `yaml:"serviceName"`
	Replicas            *int   `yaml:"replicas"`
	PodManagementPolicy string `yaml:"podManagementPolicy"`
	Selector            struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	} `yaml:"selector"`
	Template struct {
		Metadata struct {
			Labels map[string]string `yaml:"labels"`
		} `yaml:"metadata"`
		Spec strictPodSpec `yaml:"spec"`
	} `yaml:"template"`
	VolumeClaimTemplates []struct {
		Metadata struct {
			Name string `yaml:"name"`
		} `yaml:"metadata"`
		Spec struct {
			AccessModes      []string `yaml:"accessModes"`
			StorageClassName *string  `yaml:"storageClassName"`
			Resources        struct {
				Requests map[string]string `yaml:"requests"`
			} `yaml:"resources"`
		} `yaml:"spec"`
	} `yaml:"volumeClaimTemplates"`
}

type strictSeccomp struct {
	Type             string `yaml:"type"`
	LocalhostProfile string `yaml:"localhostProfile"`
}

type strictPodSpec struct {
	TerminationGracePeriodSeconds *int   `yaml:"terminationGracePeriodSeconds"`
	RestartPolicy                 string `yaml:"restartPolicy"`
	ServiceAccountName            string `yaml:"serviceAccountName"`
	AutomountServiceAccountToken  *bool  `yaml:"automountServiceAccountToken"`
	SecurityContext               struct {
		RunAsUser      *int64         `yaml:"runAsUser"`
		RunAsGroup     *int64         `yaml:"runAsGroup"`
		RunAsNonRoot   *bool          `yaml:"runAsNonRoot"`
		FSGroup        *int64         `yaml:"fsGroup"`
		SeccompProfile *strictSeccomp `yaml:"seccompProfile"`
	} `yaml:"securityContext"`
	InitContainers []strictContainer `yaml:"initContainers"`
	Containers     []strictContainer `yaml:"containers"`
	Volumes        []struct {
		Name     string `yaml:"name"`
		EmptyDir *struct {
			Medium    string `yaml:"medium"`
			SizeLimit string `yaml:"sizeLimit"`
		} `yaml:"emptyDir"`
		PersistentVolumeClaim *struct {
			ClaimName string `yaml:"claimName"`
			ReadOnly  bool   `yaml:"readOnly"`
		} `yaml:"persistentVolumeClaim"`
		Secret *struct {
			SecretName string `yaml:"secretName"`
		} `yaml:"secret"`
	} `yaml:"volumes"`
}

type strictContainer struct {
	Name            string   `yaml:"name"`
	Image           string   `yaml:"image"`
	ImagePullPolicy string   `yaml:"imagePullPolicy"`
	Command         []string `yaml:"command"`
	Args            []string `yaml:"args"`
	Env             []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			SecretKeyRef *struct {
				Name     string `yaml:"name"`
				Key      string `yaml:"key"`
				Optional *bool  `yaml:"optional"`
			} `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	EnvFrom []struct {
		SecretRef *struct {
			Name string `yaml:"name"`
		} `yaml:"secretRef"`
	} `yaml:"envFrom"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		ReadOnly  bool   `yaml:"readOnly"`
		SubPath   string `yaml:"subPath"`
	} `yaml:"volumeMounts"`
	SecurityContext struct {
		AllowPrivilegeEscalation *bool          `yaml:"allowPrivilegeEscalation"`
		Privileged               *bool          `yaml:"privileged"`
		ReadOnlyRootFilesystem   *bool          `yaml:"readOnlyRootFilesystem"`
		RunAsNonRoot             *bool          `yaml:"runAsNonRoot"`
		RunAsUser                *int64         `yaml:"runAsUser"`
		RunAsGroup               *int64         `yaml:"runAsGroup"`
		SeccompProfile           *strictSeccomp `yaml:"seccompProfile"`
		Capabilities             struct {
			Add  []string `yaml:"add"`
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
		Protocol      string `yaml:"protocol"`
	} `yaml:"ports"`
	Lifecycle *struct {
		PreStop   *strictHandler `yaml:"preStop"`
		PostStart *strictHandler `yaml:"postStart"`
	} `yaml:"lifecycle"`
}

type strictHandler struct {
	Exec *struct {
		Command []string `yaml:"command"`
	} `yaml:"exec"`
	Sleep *struct {
		Seconds int `yaml:"seconds"`
	} `yaml:"sleep"`
}

// checkSchema loads one manifest strictly; the error names the first
// unknown field or wrong type.
func checkSchema(data []byte) error {
	var obj strictObject
	if err := yaml.Load(data, &obj, yaml.WithKnownFields()); err != nil {
		return err
	}
	var spec any
	switch {
	case obj.APIVersion == "v1" && obj.Kind == "Pod":
		spec = &strictPodSpec{}
	case obj.APIVersion == "batch/v1" && obj.Kind == "CronJob":
		spec = &strictCronJobSpec{}
	case obj.APIVersion == "batch/v1" && obj.Kind == "Job":
		spec = &strictJobSpec{}
	case obj.APIVersion == "apps/v1" && obj.Kind == "StatefulSet":
		spec = &strictStatefulSetSpec{}
	default:
		return fmt.Errorf("%s %s: not a kind this schema knows", obj.APIVersion, obj.Kind)
	}
	if obj.Metadata.Name == "" {
		return errors.New("metadata.name is empty")
	}
	return obj.Spec.Load(spec, yaml.WithKnownFields())
}

// TestKubernetesManifestsSchema: every manifest loads under the schema
// above, and a misspelt field is refused.
func TestKubernetesManifestsSchema(t *testing.T) {
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("manifests: %v %v", files, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkSchema(b); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	b, err := os.ReadFile("kubernetes/pod.yaml")
	if err != nil {
		t.Fatal(err)
	}
	typo := strings.Replace(string(b), "allowPrivilegeEscalation:", "allowPrivilegeEscalaton:", 1)
	if typo == string(b) {
		t.Fatal("pod.yaml sets no allowPrivilegeEscalation")
	}
	if err := checkSchema([]byte(typo)); err == nil || !strings.Contains(err.Error(), "allowPrivilegeEscalaton") {
		t.Errorf("a misspelt field: %v, want it refused by name", err)
	}
}
