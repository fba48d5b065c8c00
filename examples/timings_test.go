package examples_test

import (
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/tether-run/tether/internal/config"
)

// margin is what a grace period must leave beyond tether's grace and drain
// timeout: the start of the drain, the report and the exit.
const margin = time.Second

// TestGracePeriodsCoverTetherTimings: the stop grace of the compose file and
// the termination grace of the pod cover the tether settings they set (or
// tether's defaults), with margin; and both put the journal on a volume.
// (kubernetes_test.go checks every runner workload of examples/kubernetes.)
// No engine or cluster is needed: test/docker runs the compose file.
func TestGracePeriodsCoverTetherTimings(t *testing.T) {
	for _, tc := range []struct {
		file    string
		grace   *regexp.Regexp // the platform's grace period
		unit    time.Duration
		journal *regexp.Regexp // the journal on a volume
	}{
		{"docker/compose.yaml", regexp.MustCompile(`(?m)^\s*stop_grace_period:\s*(\d+)s\s*$`), time.Second, regexp.MustCompile(`(?m)^\s*- tether-journal:/var/lib/tether\s*$`)},
		{"kubernetes/pod.yaml", regexp.MustCompile(`(?m)^\s*terminationGracePeriodSeconds:\s*(\d+)\s*$`), time.Second, regexp.MustCompile(`(?m)^\s*mountPath: /var/lib/tether\s*$`)},
	} {
		t.Run(tc.file, func(t *testing.T) {
			b, err := os.ReadFile(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			s := string(b)
			m := tc.grace.FindStringSubmatch(s)
			if m == nil {
				t.Fatalf("no grace period in %s", tc.file)
			}
			n, _ := time.ParseDuration(m[1] + "s")
			grace := setting(t, s, config.EnvGrace, config.DefaultGrace)
			drain := setting(t, s, config.EnvDrainTimeout, config.DefaultDrainTimeout)
			linger := setting(t, s, config.EnvMetricsLinger, 0)
			if need := grace + drain + linger + margin; n < need {
				t.Errorf("grace period %s < %s (grace) + %s (drain timeout) + %s (metrics linger) + %s", n, grace, drain, linger, margin)
			}
			if !tc.journal.MatchString(s) {
				t.Errorf("%s does not mount a volume at %s", tc.file, config.StateDir)
			}
		})
	}
}

// setting reads NAME's value as the file sets it (compose "NAME: 3s", or a
// pod's "- name: NAME" then "value: 3s"), else def.
func setting(t *testing.T, s, name string, def time.Duration) time.Duration {
	t.Helper()
	re := regexp.MustCompile(`(?m)^\s*(?:` + name + `:\s*(\S+)|- name: ` + name + `\s*\n\s*value:\s*(\S+))\s*$`)
	m := re.FindStringSubmatch(s)
	if m == nil {
		return def
	}
	v := m[1] + m[2]
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return d
}
