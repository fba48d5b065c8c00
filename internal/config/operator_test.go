package config

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func bindGroups(t *testing.T, env map[string]string, groups []Group, args ...string) (Config, error, error) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	c := Default()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	envErr := c.Bind(fs, groups...)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	return c, envErr, c.Validate()
}

func TestSweepSettings(t *testing.T) {
	c, envErr, err := bindGroups(t, map[string]string{EnvSweepOlderThan: "6h", EnvSweepIdleFor: "30m", EnvLabels: "team=a"},
		[]Group{Sweep}, "--idle-for", "45m", "--owner", "01abc", "--label", "env=ci")
	if envErr != nil || err != nil {
		t.Fatalf("env %v, validate %v", envErr, err)
	}
	if c.SweepOlderThan != 6*time.Hour || c.SweepIdleFor != 45*time.Minute || c.SweepOwner != "01abc" {
		t.Fatalf("sweep settings: %+v", c.Operator)
	}
	if c.Labels["team"] != "a" || c.Labels["env"] != "ci" {
		t.Fatalf("scope labels %v", c.Labels)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--older-than", "0s"}, "--older-than 0s: must be positive"},
		{[]string{"--idle-for", "-1m"}, "--idle-for -1m0s: must be positive"},
		{[]string{"--concurrency", "0"}, "--concurrency 0: must be between 1 and 1024"},
		{[]string{"--timeout", "0s"}, "--timeout 0s: must be positive"},
	} {
		_, _, err := bindGroups(t, nil, []Group{Sweep}, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestMetricsAddr(t *testing.T) {
	c, _, err := bindGroups(t, map[string]string{EnvMetricsAddr: ":9464"}, []Group{All, Metrics})
	if err != nil || c.MetricsAddr != ":9464" {
		t.Fatalf("%q %v", c.MetricsAddr, err)
	}
	c, _, err = bindGroups(t, nil, []Group{All})
	if err != nil || c.MetricsAddr != "" {
		t.Fatalf("metrics must be off by default: %q %v", c.MetricsAddr, err)
	}
	for _, bad := range []string{"9464", "host:port", "[::1]:70000"} {
		_, _, err := bindGroups(t, nil, []Group{Metrics}, "--metrics-addr", bad)
		if err == nil || !strings.Contains(err.Error(), "--metrics-addr") {
			t.Errorf("%q: got %v", bad, err)
		}
	}
}
