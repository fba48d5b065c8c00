package providers

import (
	"context"
	"flag"
	"net/http"
	"net/url"
	"time"

	"github.com/tether-run/tether/provider"
)

// Demo is a provider's part of `tether demo` (internal/demo): a stand-in
// for its API that a newcomer runs tether against with no account, the
// record of what became of every sandbox it saw, and the client the
// demo's sample runner creates sandboxes with. A provider with a
// simulator serves it (`tether demo NAME`, its record with `tether demo
// NAME ls`); the default provider's stand-in is also where `tether demo`
// tells its story. Nil Kind.Demo: the provider has no demo.
//
// A provider adds its own in <name>_demo.go. One whose stand-in is real
// rather than simulated (Docker: the local engine) leaves Flags nil, so
// that `tether demo NAME` tells the story on it (Story), and gives Runner.
type Demo struct {
	// Title names the provider in the demo's sentences ("Daytona").
	Title string
	// Addr is where `tether demo NAME` listens unless --addr says
	// otherwise: loopback, on a port of the provider's own.
	Addr string
	// Usage is the help of `tether demo NAME` (and of its ls): what the
	// stand-in is, its fault keys, an example. The flags follow it.
	Usage string
	// Flags binds the simulator's own flags (--faults, a key, a clock) on
	// fs, beside the --addr of `tether demo NAME`, and returns what starts
	// it once fs is parsed; start's error is a usage error that names the
	// flag at fault. Nil: nothing to serve (see Story).
	Flags func(fs *flag.FlagSet) (start func() (*Stand, error))
	// Story starts the stand-in `tether demo` tells its story against, at
	// the story's pace, with faults (the provider's own --faults keys) on
	// top. The story is the default provider's (`tether demo`), and that
	// of a provider with nothing to serve (`tether demo NAME`). Nil: none.
	Story func(faults string) (*Stand, error)
	// LsAddr is the simulator `tether demo NAME ls` asks when given no
	// --addr: the one the user's exported API URL names (read by getenv)
	// when it is plain http (a simulator's), else Addr. ls reads a served
	// simulator's record: with Flags nil there is no ls.
	LsAddr func(getenv func(string) string) string
	// Runner opens the provider's client as a runner holds it, from the
	// environment its SDK reads (under tether run, the API URL is tether's
	// proxy): what the sample runner creates and deletes sandboxes with.
	// Nil: the sample runner cannot create in this provider.
	Runner func(o RunnerOptions) (RunnerClient, error)
}

// Stand is a provider's stand-in as the demo runs it: a simulator tether
// serves on loopback, or something real it only points at.
type Stand struct {
	// Handler serves the stand-in's API; nil when tether serves nothing
	// (a real stand-in: Env points at it whatever base is).
	Handler http.Handler
	// URL is its API's URL when served at base ("http://HOST:PORT").
	URL func(base string) string
	// Env is what tether run and a runner export to use it, served at
	// base: its API URL and key, as the provider's SDKs read them.
	Env func(base string) []string
	// Notes are said once it is up: the faults in force, a scaled clock.
	Notes []string
	// Run are flags of the story's `tether run` (Daytona: its proxy off,
	// so that what tether journals is the runner's own word).
	Run []string
	// Backstop, in the story's first step, says how the sample runner
	// leaves its sandboxes to the provider's own cleanup.
	Backstop string
	// NoBackstop: the provider has no timer of its own that tether sets
	// on a sandbox (Docker): the story waits for none.
	NoBackstop bool
	// Record is every sandbox the stand-in has seen, in creation order,
	// deleted ones included, by its own record (never tether's report).
	Record func() []DemoSandbox
	// Close stops it, releasing the requests a fault holds.
	Close func()
}

// DemoSandbox is one sandbox of a stand-in's record, as `tether demo NAME ls`
// lists it and GET RecordPath serves it.
type DemoSandbox struct {
	ID string `json:"id"`
	// Name is the name it was created with (tether-<intent> for one
	// tether declared), whatever the provider renamed it to since.
	Name    string            `json:"name"`
	State   string            `json:"state"`
	Labels  map[string]string `json:"labels"`
	Created time.Time         `json:"createdAt"`
	// Gone: it no longer exists (destroyed, killed).
	Gone bool `json:"gone"`
	// DeletedBy says what deleted it: "DELETE from " and the caller's
	// User-Agent for an API call ("DELETE from tether" is tether's drain,
	// replay or sweep), or the provider's own timer; "" while nothing did.
	DeletedBy string `json:"deletedBy,omitempty"`
	// Ends says what the provider does to it if no one deletes it
	// ("auto-stop 15 min", "timeout at 12:00:05"); Endless: nothing ever
	// will (Daytona's auto-stop off).
	Ends    string `json:"ends,omitempty"`
	Endless bool   `json:"endless,omitempty"`
}

// RecordPath is where a served stand-in's record is, beside its API.
const RecordPath = "/_sim/sandboxes"

// RunnerOptions say how the sample runner creates its sandboxes.
type RunnerOptions struct {
	// AutoStop is the idle auto-stop, in minutes, sent with each create
	// where the provider has one (Daytona); 0 turns it off, as the runners
	// that leak leave it.
	AutoStop int
}

// RunnerClient is a provider's client as a runner holds it: Create, and
// the Provider's calls (Delete) for its own cleanup.
type RunnerClient struct {
	provider.Provider
	Create func(ctx context.Context, name string, labels map[string]string) (provider.Sandbox, error)
}

// Lookup is the registered provider of that name.
func Lookup(name string) (Kind, bool) {
	for _, k := range Registered() {
		if k.Name == name {
			return k, true
		}
	}
	return Kind{}, false
}

// Names is every registered provider's name, in the order of Registered.
func Names() []string {
	var names []string
	for _, k := range Registered() {
		names = append(names, k.Name)
	}
	return names
}

// lsAddr is a Demo.LsAddr: the host of the API URL in variable when it
// is plain http (a simulator's: the real APIs are https), else def.
func lsAddr(variable, def string) func(getenv func(string) string) string {
	return func(getenv func(string) string) string {
		if u, err := url.Parse(getenv(variable)); err == nil && u.Scheme == "http" && u.Host != "" {
			return u.Host
		}
		return def
	}
}

// demoRecord is a simulator's record of every sandbox, each as ls lists
// it.
func demoRecord[S any](all []S, each func(S) DemoSandbox) []DemoSandbox {
	out := make([]DemoSandbox, 0, len(all))
	for _, sb := range all {
		out = append(out, each(sb))
	}
	return out
}
