// Package config is tether's one configuration struct: every setting with its
// default, its flag and its TETHER_* environment variable, validated once at
// start with messages that name the setting and say what is wrong.
//
// Precedence: flag, then environment variable, then default.
package config

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tether-run/tether/intent"
)

// Config holds every setting of tether run (and the subset other subcommands use).
type Config struct {
	// Supervisor.
	Grace           time.Duration // time the child gets after the first TERM/INT before its group is SIGKILLed
	SignalChildOnly bool          // forward signals to the child alone, not its process group
	LogFormat       string        // text or json
	LogLevel        string        // debug, info, warn, error

	// Journal and intake.
	Journal string            // bbolt file
	Socket  string            // Unix socket of the intent API
	Spool   string            // spool directory
	Labels  map[string]string // scope labels added to every intent

	// Drain.
	DrainTimeout        time.Duration // deadline of the whole drain
	DrainConcurrency    int           // provider calls in flight during a drain
	OnUnresolved        string        // exit-code or ignore
	NeverCreatedHorizon time.Duration // a never-seen name older than this closes as never-created
	Retention           time.Duration // an ended intent is kept this long, then pruned from the journal

	// Daytona.
	DaytonaAutoStop int // minutes; enforced on every sandbox whose auto-stop is 0
	// RequireProvider makes a missing or broken provider setup fatal: tether
	// run exits 125 before the child starts instead of warning.
	RequireProvider bool
	CheckTimeout    time.Duration // bound of the start-up provider check (--provider-check-timeout)

	// Daytona API proxy (zero-code mode).
	DaytonaProxy     bool   // serve it and point the child's DAYTONA_API_URL at it
	DaytonaProxyAddr string // loopback host:port it listens on; port 0 picks a free one

	// Metrics endpoint and tether sweep (operator.go).
	Operator

	// Lease mode (lease.go).
	LeaseSettings

	// E2B (e2b.go).
	E2BSettings

	// Docker (docker.go).
	DockerSettings
}

// Defaults. Grace + DrainTimeout (3 s + 5 s) leaves 2 s of margin inside the
// 10 s docker stop gives before its SIGKILL.
const (
	DefaultGrace        = 3 * time.Second
	DefaultDrainTimeout = 5 * time.Second
	// DefaultDrainConcurrency: provider calls in flight during a drain. At
	// two calls per sandbox on the healthy path (delete, confirm) and 50 ms
	// a call, 64 drain 1,000 sandboxes in about 2 s.
	DefaultDrainConcurrency = 64
	// DefaultNeverCreatedHorizon: a name never seen this long after its
	// intent was declared closes as never-created (the create may land
	// until then: a provider under load takes minutes).
	DefaultNeverCreatedHorizon = 30 * time.Minute
	// DefaultRetention keeps an ended intent a week: `tether status` and
	// an operator's questions about last week's runs still find it, and the
	// journal stays bounded by a week of work.
	DefaultRetention       = 7 * 24 * time.Hour
	DefaultDaytonaAutoStop = 15
	// DefaultProviderCheckTimeout bounds the one authenticated read tether
	// makes at start to check its provider setup (a background check,
	// unless --require-provider makes the child wait for it).
	DefaultProviderCheckTimeout = 10 * time.Second
	// DefaultDaytonaProxyAddr: loopback only, an ephemeral port.
	DefaultDaytonaProxyAddr = "127.0.0.1:0"
	// UnresolvedExitCode is tether's exit code when --on-unresolved=exit-code
	// and intents were left live, and the child itself exited 0.
	UnresolvedExitCode = 3
)

// Default returns the configuration with every default filled in.
func Default() Config {
	return Config{
		Grace:               DefaultGrace,
		LogFormat:           "text",
		LogLevel:            "info",
		Journal:             defaultJournal(),
		Socket:              defaultPath("tether.sock", RuntimeDir),
		Spool:               defaultPath("spool", RuntimeDir),
		Labels:              map[string]string{},
		DrainTimeout:        DefaultDrainTimeout,
		DrainConcurrency:    DefaultDrainConcurrency,
		OnUnresolved:        "ignore",
		NeverCreatedHorizon: DefaultNeverCreatedHorizon,
		Retention:           DefaultRetention,
		DaytonaAutoStop:     DefaultDaytonaAutoStop,
		CheckTimeout:        DefaultProviderCheckTimeout,
		DaytonaProxy:        true,
		DaytonaProxyAddr:    DefaultDaytonaProxyAddr,
		Operator:            defaultOperator(),
		LeaseSettings:       LeaseSettings{LeaseMinute: DefaultLeaseMinute},
		E2BSettings:         defaultE2B(),
		DockerSettings:      defaultDocker(),
	}
}

// Env names, one per setting.
const (
	EnvGrace           = "TETHER_GRACE"
	EnvSignalChildOnly = "TETHER_SIGNAL_CHILD_ONLY"
	EnvLogFormat       = "TETHER_LOG_FORMAT"
	EnvLogLevel        = "TETHER_LOG_LEVEL"
	EnvJournal         = "TETHER_JOURNAL"
	EnvSocket          = "TETHER_SOCKET"
	EnvSpool           = "TETHER_SPOOL"
	EnvOwner           = "TETHER_OWNER"
	EnvLabels          = "TETHER_LABELS"
	EnvDrainTimeout    = "TETHER_DRAIN_TIMEOUT"
	EnvDrainConc       = "TETHER_DRAIN_CONCURRENCY"
	EnvOnUnresolved    = "TETHER_ON_UNRESOLVED"
	EnvNeverCreated    = "TETHER_NEVER_CREATED_AFTER"
	EnvRetention       = "TETHER_RETENTION"
	EnvDaytonaAutoStop = "TETHER_DAYTONA_AUTOSTOP"
	EnvDaytonaProxy    = "TETHER_DAYTONA_PROXY"
	EnvDaytonaProxyAdr = "TETHER_DAYTONA_PROXY_ADDR"
	EnvRequireProvider = "TETHER_REQUIRE_PROVIDER"
	EnvProviderCheck   = "TETHER_PROVIDER_CHECK_TIMEOUT"
)

// envError collects bad environment values so they are reported with the
// flag errors, not silently replaced by defaults.
type binder struct {
	fs   *flag.FlagSet
	errs []error
}

func (b *binder) duration(p *time.Duration, name, env, usage string) {
	if v, ok := os.LookupEnv(env); ok && v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.errs = append(b.errs, fmt.Errorf("%s=%q: not a duration (e.g. 3s, 500ms)", env, v))
		} else {
			*p = d
		}
	}
	b.fs.DurationVar(p, name, *p, usage+" ($"+env+")")
}

func (b *binder) int(p *int, name, env, usage string) {
	if v, ok := os.LookupEnv(env); ok && v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			b.errs = append(b.errs, fmt.Errorf("%s=%q: not a whole number", env, v))
		} else {
			*p = n
		}
	}
	b.fs.IntVar(p, name, *p, usage+" ($"+env+")")
}

func (b *binder) bool(p *bool, name, env, usage string) {
	if v, ok := os.LookupEnv(env); ok && v != "" {
		t, err := strconv.ParseBool(v)
		if err != nil {
			b.errs = append(b.errs, fmt.Errorf("%s=%q: not true or false", env, v))
		} else {
			*p = t
		}
	}
	b.fs.BoolVar(p, name, *p, usage+" ($"+env+")")
}

func (b *binder) string(p *string, name, env, usage string) {
	if v, ok := os.LookupEnv(env); ok && v != "" {
		*p = v
	}
	b.fs.StringVar(p, name, *p, usage+" ($"+env+")")
}

// Group is a set of settings a subcommand takes; each subcommand binds
// only the groups it uses, so its -h lists only its own flags.
type Group uint

const (
	// Supervise: the child's supervision (tether run only).
	Supervise Group = 1 << iota
	// Intake: where the runner declares intents, and the scope labels.
	Intake
	// Journal: the journal file.
	Journal
	// Drain: how live intents are resolved.
	Drain
	// Log: log format and level.
	Log
	// All is every setting: tether run.
	All = Supervise | Intake | Journal | Drain | Log
)

// SpoolDir is --spool alone, for a command that takes the spool's files
// but serves no runner (tether drain); Intake has it too.
const SpoolDir Group = Sweep << 1

// Bind registers the settings of groups as flags on fs (all of them when no
// group is given), each with its current value overridden by its
// environment variable. It returns the errors found in the environment;
// call Validate after fs.Parse.
func (c *Config) Bind(fs *flag.FlagSet, groups ...Group) error {
	want := Group(0)
	for _, g := range groups {
		want |= g
	}
	if want == 0 {
		want = All
	}
	b := &binder{fs: fs}
	if want&Supervise != 0 {
		b.duration(&c.Grace, "grace", EnvGrace, "time the child gets after SIGTERM/SIGINT before its process group is killed")
		b.bool(&c.SignalChildOnly, "signal-child-only", EnvSignalChildOnly, "forward signals to the child alone, not its process group")
		b.bool(&c.RequireProvider, "require-provider", EnvRequireProvider, "exit 125 before the child starts when the provider is missing or its check fails (credentials, URL, TLS), instead of warning")
		b.duration(&c.CheckTimeout, "provider-check-timeout", EnvProviderCheck, "bound of the provider check tether makes at start (one authenticated read)")
		b.string(&c.OnUnresolved, "on-unresolved", EnvOnUnresolved, "when intents stay live after the drain: ignore, or exit-code (exit "+strconv.Itoa(UnresolvedExitCode)+" if the child exited 0)")
	}
	if want&Log != 0 {
		b.string(&c.LogFormat, "log-format", EnvLogFormat, "log format: text or json")
		b.string(&c.LogLevel, "log-level", EnvLogLevel, "log level: debug, info, warn or error")
	}
	if want&Journal != 0 {
		b.string(&c.Journal, "journal", EnvJournal, "path of the bbolt journal")
	}
	if want&Intake != 0 {
		b.string(&c.Socket, "socket", EnvSocket, "path of the Unix socket of the intent API")
	}
	if want&(Intake|SpoolDir) != 0 {
		b.string(&c.Spool, "spool", EnvSpool, "spool directory for intent files")
	}
	if want&Intake != 0 {
		if v, ok := os.LookupEnv(EnvLabels); ok && v != "" {
			labels, err := ParseLabels(v)
			if err != nil {
				b.errs = append(b.errs, fmt.Errorf("%s: %w", EnvLabels, err))
			}
			for k, v := range labels {
				c.Labels[k] = v
			}
		}
		fs.Var(labelFlag{c.Labels}, "label", "scope label k=v added to every intent; repeatable ($"+EnvLabels+", comma-separated)")
		b.bool(&c.DaytonaProxy, "daytona-proxy", EnvDaytonaProxy, "serve a Daytona API proxy on loopback and point the child's DAYTONA_API_URL at it, so unchanged runners are covered (false turns it off)")
		b.string(&c.DaytonaProxyAddr, "daytona-proxy-addr", EnvDaytonaProxyAdr, "loopback host:port of the Daytona API proxy; port 0 picks a free one")
	}
	if want&Drain != 0 {
		b.duration(&c.DrainTimeout, "drain-timeout", EnvDrainTimeout, "deadline of the drain")
		b.int(&c.DrainConcurrency, "drain-concurrency", EnvDrainConc, "provider calls in flight during a drain (deletes first, then verifying reads, then confirmations)")
		b.duration(&c.NeverCreatedHorizon, "never-created-after", EnvNeverCreated, "a pending intent whose name was never seen for this long closes as never-created")
		b.int(&c.DaytonaAutoStop, "daytona-autostop", EnvDaytonaAutoStop, "Daytona auto-stop minutes enforced on sandboxes that have it disabled (>= 1)")
		b.duration(&c.Retention, "retention", EnvRetention, "an ended intent (gone, released, never-created, foreign, stopped) is kept in the journal this long, then pruned in the background; a journal left mostly free is compacted when it is next opened")
	}
	c.bindOperator(b, want)
	c.bindLease(b, want)
	c.bindE2B(b, want)
	c.bindDocker(b, want)
	return errors.Join(b.errs...)
}

// LabelFlag is a repeatable k=v flag that adds to its map.
func LabelFlag(m map[string]string) flag.Value { return labelFlag{m} }

type labelFlag struct{ m map[string]string }

func (l labelFlag) String() string {
	keys := make([]string, 0, len(l.m))
	for k := range l.m {
		keys = append(keys, k+"="+l.m[k])
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

func (l labelFlag) Set(s string) error { return addLabel(l.m, s) }

func addLabel(m map[string]string, kv string) error {
	k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
	if !ok || k == "" {
		return fmt.Errorf("label %q: want k=v", kv)
	}
	if strings.HasPrefix(k, intent.NamePrefix) {
		return fmt.Errorf("label %q: keys starting with %s are reserved for ownership labels", kv, intent.NamePrefix)
	}
	m[k] = v
	return nil
}

// ParseLabels reads labels in the form of $TETHER_LABELS: k=v pairs
// separated by commas. Every bad entry is an error; none is dropped.
func ParseLabels(s string) (map[string]string, error) {
	m := map[string]string{}
	var errs []error
	for _, kv := range strings.Split(s, ",") {
		if err := addLabel(m, kv); err != nil {
			errs = append(errs, err)
		}
	}
	return m, errors.Join(errs...)
}

// FormatLabels writes labels in the form ParseLabels reads, sorted by key.
func FormatLabels(m map[string]string) string { return labelFlag{m}.String() }

// Validate checks every setting once, and says which one is wrong and why.
// It makes the paths absolute.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.Grace < 0 {
		bad("--grace %s: must not be negative", c.Grace)
	}
	if c.DrainTimeout <= 0 {
		bad("--drain-timeout %s: must be positive", c.DrainTimeout)
	}
	if c.DrainConcurrency < 1 || c.DrainConcurrency > 1024 {
		bad("--drain-concurrency %d: must be between 1 and 1024", c.DrainConcurrency)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		bad("--log-format %q: must be text or json", c.LogFormat)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("--log-level %q: must be debug, info, warn or error", c.LogLevel)
	}
	if c.OnUnresolved != "ignore" && c.OnUnresolved != "exit-code" {
		bad("--on-unresolved %q: must be ignore or exit-code", c.OnUnresolved)
	}
	if c.DaytonaAutoStop < 1 {
		bad("--daytona-autostop %d: must be at least 1 minute (0 disables Daytona's auto-stop, the backstop that bounds a leaked sandbox)", c.DaytonaAutoStop)
	}
	if c.CheckTimeout <= 0 {
		bad("--provider-check-timeout %s: must be positive", c.CheckTimeout)
	}
	if c.NeverCreatedHorizon <= 0 {
		bad("--never-created-after %s: must be positive", c.NeverCreatedHorizon)
	}
	if c.Retention <= 0 {
		bad("--retention %s: must be positive (ended intents are kept this long, then pruned)", c.Retention)
	}
	if c.DaytonaProxy {
		if err := checkLoopback(c.DaytonaProxyAddr); err != nil {
			bad("--daytona-proxy-addr %q: %v", c.DaytonaProxyAddr, err)
		}
	}
	for name, p := range map[string]*string{"--journal": &c.Journal, "--socket": &c.Socket, "--spool": &c.Spool} {
		if *p == "" {
			bad("%s: must not be empty", name)
			continue
		}
		// The child gets these paths in its environment and may run in
		// another directory, so they are made absolute once, here.
		abs, err := filepath.Abs(*p)
		if err != nil {
			bad("%s %q: %v", name, *p, err)
			continue
		}
		*p = abs
	}
	if len(c.Socket) > 100 {
		bad("--socket %q: longer than a Unix socket path may be (%d > 100 bytes)", c.Socket, len(c.Socket))
	}
	// Scope labels go on every intent; checked here so a bad one stops
	// tether at start instead of failing every create with a 400.
	if err := intent.ValidateLabels(c.Labels); err != nil {
		bad("--label: %v", err)
	}
	for k, v := range c.Labels {
		// The child gets the scope labels as $TETHER_LABELS, k=v,k=v.
		if strings.Contains(v, ",") {
			bad("--label %s=%q: a scope label value may not contain a comma (it could not reach the child in $%s)", k, v, EnvLabels)
		}
	}
	errs = append(errs, c.validateOperator()...)
	errs = append(errs, c.validateLease()...)
	errs = append(errs, c.validateE2B()...)
	errs = append(errs, c.validateDocker()...)
	return errors.Join(errs...)
}

// checkLoopback accepts host:port with a loopback host: the proxy forwards
// whatever it is sent and journals intents, so only this machine may reach it.
func checkLoopback(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("want host:port (e.g. %s)", DefaultDaytonaProxyAddr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q: want a number from 0 to 65535", port)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("host %q: must be a loopback address (127.0.0.1, ::1 or localhost); the proxy must not be reachable from outside", host)
	}
	return nil
}
