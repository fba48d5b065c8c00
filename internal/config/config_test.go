package config

import (
	"flag"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func bind(t *testing.T, env map[string]string, args ...string) (Config, error, error) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	c := Default()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	envErr := c.Bind(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	return c, envErr, c.Validate()
}

func TestDefaultsAreValidAndFitDockerStop(t *testing.T) {
	_, envErr, err := bind(t, nil)
	if envErr != nil || err != nil {
		t.Fatalf("defaults: env %v, validate %v", envErr, err)
	}
	// docker stop SIGKILLs 10 s after its SIGTERM: grace and drain must fit with margin.
	if margin := 10*time.Second - DefaultGrace - DefaultDrainTimeout; margin < time.Second {
		t.Fatalf("grace %s + drain %s leave %s inside docker stop's 10 s", DefaultGrace, DefaultDrainTimeout, margin)
	}
}

func TestFlagBeatsEnvBeatsDefault(t *testing.T) {
	c, envErr, err := bind(t, map[string]string{EnvGrace: "7s", EnvDrainTimeout: "2s", EnvLabels: "team=a,env=prod"}, "--grace", "1s", "--label", "team=b")
	if envErr != nil || err != nil {
		t.Fatalf("env %v, validate %v", envErr, err)
	}
	if c.Grace != time.Second {
		t.Errorf("grace %s, want the flag's 1s", c.Grace)
	}
	if c.DrainTimeout != 2*time.Second {
		t.Errorf("drain timeout %s, want the environment's 2s", c.DrainTimeout)
	}
	if c.Labels["team"] != "b" || c.Labels["env"] != "prod" {
		t.Errorf("labels %v, want team=b (flag) and env=prod (environment)", c.Labels)
	}
	if c.DrainConcurrency != DefaultDrainConcurrency {
		t.Errorf("concurrency %d, want the default", c.DrainConcurrency)
	}
}

func TestRelativePathsBecomeAbsolute(t *testing.T) {
	c, _, err := bind(t, nil, "--journal", "j.db", "--socket", "s.sock", "--spool", "sp")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{c.Journal, c.Socket, c.Spool} {
		if !filepath.IsAbs(p) {
			t.Errorf("%q is not absolute: the child may run elsewhere", p)
		}
	}
}

// Every bad setting is reported by the name the user typed, with why.
func TestBadSettingsNameTheSetting(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string // in the env error or the validation error
	}{
		{"negative grace", nil, []string{"--grace", "-1s"}, "--grace"},
		{"zero drain timeout", nil, []string{"--drain-timeout", "0s"}, "--drain-timeout"},
		{"concurrency 0", nil, []string{"--drain-concurrency", "0"}, "--drain-concurrency"},
		{"log format", nil, []string{"--log-format", "xml"}, "--log-format"},
		{"log level", nil, []string{"--log-level", "loud"}, "--log-level"},
		{"on-unresolved", nil, []string{"--on-unresolved", "panic"}, "--on-unresolved"},
		{"auto-stop 0 disables the backstop", nil, []string{"--daytona-autostop", "0"}, "--daytona-autostop"},
		{"horizon", nil, []string{"--never-created-after", "0s"}, "--never-created-after"},
		{"long socket path", nil, []string{"--socket", "/" + strings.Repeat("s", 120)}, "--socket"},
		{"reserved label", nil, []string{"--label", "tether-owner=x"}, "reserved"},
		{"env not a duration", map[string]string{EnvGrace: "soon"}, nil, EnvGrace},
		{"env not a number", map[string]string{EnvDrainConc: "many"}, nil, EnvDrainConc},
		{"env not a bool", map[string]string{EnvSignalChildOnly: "perhaps"}, nil, EnvSignalChildOnly},
		{"env bad label", map[string]string{EnvLabels: "novalue"}, nil, EnvLabels},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			c := Default()
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			envErr := c.Bind(fs)
			var msgs []string
			if envErr != nil {
				msgs = append(msgs, envErr.Error())
			}
			if err := fs.Parse(tc.args); err != nil {
				msgs = append(msgs, err.Error())
			} else if err := c.Validate(); err != nil {
				msgs = append(msgs, err.Error())
			}
			all := strings.Join(msgs, "\n")
			if !strings.Contains(all, tc.want) {
				t.Fatalf("errors %q do not name %q", all, tc.want)
			}
		})
	}
}

func TestDaytonaProxySettings(t *testing.T) {
	c, envErr, err := bind(t, nil)
	if envErr != nil || err != nil || !c.DaytonaProxy || c.DaytonaProxyAddr != DefaultDaytonaProxyAddr {
		t.Fatalf("defaults: proxy %v on %q (%v, %v), want on at %s", c.DaytonaProxy, c.DaytonaProxyAddr, envErr, err, DefaultDaytonaProxyAddr)
	}
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:0", true}, {"localhost:8080", true}, {"[::1]:9000", true}, {"127.0.0.2:1", true},
		{"0.0.0.0:8080", false}, {":8080", false}, {"10.0.0.1:80", false}, {"127.0.0.1", false}, {"127.0.0.1:99999", false},
	} {
		_, _, err := bind(t, nil, "--daytona-proxy-addr", tc.addr)
		if (err == nil) != tc.ok {
			t.Errorf("--daytona-proxy-addr %s: %v, want ok=%v", tc.addr, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "--daytona-proxy-addr") {
			t.Errorf("error does not name the setting: %v", err)
		}
	}
	// Off, the address is not checked: nothing listens on it.
	if _, _, err := bind(t, nil, "--daytona-proxy=false", "--daytona-proxy-addr", "0.0.0.0:1"); err != nil {
		t.Errorf("proxy off: %v", err)
	}
	c, envErr, err = bind(t, map[string]string{EnvDaytonaProxy: "false"})
	if envErr != nil || err != nil || c.DaytonaProxy {
		t.Fatalf("%s=false: proxy %v (%v, %v)", EnvDaytonaProxy, c.DaytonaProxy, envErr, err)
	}
}
