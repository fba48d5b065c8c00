// Package docs holds tether's documentation and the test that keeps its
// package graph true: the graph in ARCHITECTURE.md is generated from
// `go list`, and the import rules it states are checked here.
package docs

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the package graph in ARCHITECTURE.md")

const (
	module     = "github.com/tether-run/tether/"
	graphStart = "<!-- package graph: generated from `go list` by `go test ./docs -update`; do not edit by hand -->"
	graphEnd   = "<!-- end of package graph -->"
)

// packages maps each package of the module (relative path) to the module
// packages it imports in its non-test files.
func packages(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", "../...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	graph := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
			GoFiles    []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if len(p.GoFiles) == 0 {
			continue // a folder of tests only, such as this one
		}
		name := strings.TrimPrefix(p.ImportPath, module)
		var deps []string
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module) {
				deps = append(deps, strings.TrimPrefix(imp, module))
			}
		}
		sort.Strings(deps)
		graph[name] = deps
	}
	return graph
}

// render draws the graph as one line per package, its imports after the
// arrow, in the order of the layers (commands first, leaves last).
func render(graph map[string][]string) string {
	names := make([]string, 0, len(graph))
	for n := range graph {
		if strings.HasPrefix(n, "test/") || n == "test" || strings.HasPrefix(n, "bench/") {
			continue // tools and test programs: not part of tether's layers
		}
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if li, lj := layer(names[i]), layer(names[j]); li != lj {
			return li < lj
		}
		return names[i] < names[j]
	})
	width := 0
	for _, n := range names {
		width = max(width, len(n))
	}
	var b strings.Builder
	for _, n := range names {
		deps := graph[n]
		if len(deps) == 0 {
			fmt.Fprintf(&b, "    %s\n", n)
			continue
		}
		fmt.Fprintf(&b, "    %-*s -> %s\n", width, n, strings.Join(deps, ", "))
	}
	return b.String()
}

// layer orders packages from the top (commands) to the leaves; imports
// point from a lower number to a higher one.
func layer(pkg string) int {
	switch {
	case strings.HasPrefix(pkg, "cmd/"), strings.HasPrefix(pkg, "examples"):
		return 0
	case pkg == "internal/sidecar":
		return 1
	case pkg == "internal/providers", pkg == "internal/demo", strings.HasPrefix(pkg, "internal/demo/"), pkg == "internal/doctor":
		return 2
	case pkg == "internal/config", pkg == "internal/metrics":
		return 3
	case strings.HasPrefix(pkg, "internal/intake/"), proxyOf(pkg) != "":
		return 4
	case pkg == "internal/intake", pkg == "internal/reaper", pkg == "internal/lease":
		return 5
	case strings.HasPrefix(pkg, "internal/"):
		return 7 // leaves shared by the layers above: crash points, strict JSON
	case providerOf(pkg) != "" && strings.Contains(pkg, "test"):
		return 6 // simulators: nothing of tether but the provider they stand in for
	default:
		return 8 // journal, intent, provider, supervisor and their subpackages
	}
}

// providerOf is the provider a package belongs to (provider/NAME and
// below; not the neutral provider/internal), or "".
func providerOf(pkg string) string {
	parts := strings.Split(pkg, "/")
	if len(parts) < 2 || parts[0] != "provider" || parts[1] == "internal" {
		return ""
	}
	return parts[1]
}

// proxyOf is the provider whose zero-code API proxy pkg is
// (provider/NAME/NAMEproxy), or "".
func proxyOf(pkg string) string {
	name := providerOf(pkg)
	if name != "" && pkg == "provider/"+name+"/"+name+"proxy" {
		return name
	}
	return ""
}

// registry is the one package outside provider/ that names providers.
const registry = "internal/providers"

// forbidden says why an import breaks the one-way rule, or "".
func forbidden(from, to string) string {
	under := func(p, prefix string) bool { return p == prefix || strings.HasPrefix(p, prefix+"/") }
	intakeShared := under(to, "internal/intake") && (to == "internal/intake" || sharedIntake(to))
	switch {
	case under(to, "cmd"):
		return "nothing imports a command"
	case under(to, "examples") && !under(from, "examples"):
		return "tether ships nothing of its examples"
	case under(from, "intent"):
		return "the intent vocabulary imports nothing of tether's"
	case under(from, "journal") && !under(to, "journal") && to != "intent":
		return "the journal imports nothing of tether's but the intent vocabulary and its own subpackages"
	case under(from, "intentapi") && (under(to, "journal") || strings.HasPrefix(to, "internal/")):
		return "the public intent API speaks the intent vocabulary; it links no storage and nothing internal"
	// Examples are runners: users of tether's public packages, a
	// provider's client among them, as a runner copying one would be.
	case providerOf(to) != "" && providerOf(from) != providerOf(to) && from != registry && !under(from, "internal/testutil") && !under(from, "examples"):
		return "only the registry (internal/providers) names a provider outside its own tree; the rest holds providers by name"
	case proxyOf(from) != "" && !(under(to, "provider") || to == "intent" || to == "internal/crashpoint" || intakeShared):
		return "a provider's API proxy is an intake: its provider, the intent vocabulary and what intakes share"
	case under(from, "provider") && proxyOf(from) == "" && !under(to, "provider") && to != "internal/dotenv":
		return "a provider knows nothing of the journal, the intakes or the supervisor"
	case under(from, "supervisor") && !under(to, "supervisor"):
		return "the supervisor knows nothing of intents"
	case to == "internal/sidecar" && !under(from, "cmd") && !under(from, "test"):
		return "only commands and end-to-end tests start a sidecar"
	case to == registry && !under(from, "cmd") && from != "internal/sidecar" && from != "internal/doctor" && !under(from, "internal/demo"):
		return "the registry is the sidecar's and the commands'"
	case under(from, "internal/intake") && (under(to, "internal/reaper") || under(to, "internal/lease") || under(to, "internal/sidecar")):
		return "an intake is handed what it needs of the drain; it imports neither reaper, lease nor sidecar"
	case strings.HasPrefix(from, "internal/intake/") && strings.HasPrefix(to, "internal/intake/") && !sharedIntake(to):
		return "intakes are siblings: what two of them share lives in internal/intake or a shared subpackage"
	case (under(from, "internal/reaper") || under(from, "internal/lease")) && under(to, "internal/intake"):
		return "the drain and the renewers do not know the intakes"
	case under(from, "internal/config") && (under(to, "internal/reaper") || under(to, "internal/lease") || under(to, "internal/sidecar")):
		return "the configuration owns its defaults"
	}
	return ""
}

// sharedIntake: a subpackage of internal/intake that intakes may share (the
// API proxies' provider-neutral core), not an intake itself.
func sharedIntake(pkg string) bool {
	for _, part := range strings.Split(pkg, "/")[2:] {
		switch part {
		case "apiproxy":
			return true
		}
	}
	return false
}

func TestPackageGraph(t *testing.T) {
	graph := packages(t)
	for from, deps := range graph {
		if strings.HasPrefix(from, "test") || strings.HasPrefix(from, "bench") {
			continue
		}
		for _, to := range deps {
			if why := forbidden(from, to); why != "" {
				t.Errorf("%s imports %s: %s", from, to, why)
			}
		}
	}

	doc, err := os.ReadFile("ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	start := strings.Index(text, graphStart)
	end := strings.Index(text, graphEnd)
	if start < 0 || end < start {
		t.Fatalf("ARCHITECTURE.md has no package graph between %q and %q", graphStart, graphEnd)
	}
	want := graphStart + "\n\n" + render(graph) + "\n" + graphEnd
	got := text[start : end+len(graphEnd)]
	if got == want {
		return
	}
	if *update {
		if err := os.WriteFile("ARCHITECTURE.md", []byte(text[:start]+want+text[end+len(graphEnd):]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("the package graph in ARCHITECTURE.md is out of date; run `go test ./docs -update`. It should read:\n%s", render(graph))
}

// TestForbiddenImports: the rules above reject the edges that would turn
// the graph around, and let the ones the design draws pass.
func TestForbiddenImports(t *testing.T) {
	for _, c := range []struct {
		from, to string
		bad      bool
	}{
		{"journal", "internal/crashpoint", true},
		{"journal", "journal/durable", false},
		{"journal", "intent", false},
		{"intent", "journal", true},
		{"intentapi", "intent", false},
		{"intentapi", "journal", true},
		{"provider/daytona", "journal", true},
		{"provider/daytona/daytonatest", "provider", false},
		{"provider/daytona/daytonaproxy", "internal/intake/apiproxy", false},
		{"provider/daytona/daytonaproxy", "internal/reaper", true},
		{"provider/daytona/daytonaproxy", "internal/intake/socket", true},
		{"provider/e2b/e2bproxy", "provider/daytona", true},
		{"internal/sidecar", "provider/daytona", true},
		{"internal/reaper", "provider/e2b", true},
		{"internal/metrics", "provider/e2b", true},
		{"internal/providers", "provider/e2b/e2bproxy", false},
		{"internal/reaper", "internal/providers", true},
		{"supervisor", "internal/config", true},
		{"internal/reaper", "cmd/tether", true},
		{"internal/demo", "examples/go/samplerunner", true},
		{"cmd/tether", "examples/go", true},
		{"cmd/tether", "provider/daytona/daytonatest", true},
		{"internal/doctor", "provider/daytona", true},
		{"internal/demo", "provider/e2b/e2btest", true},
		{"internal/demo/samplerunner", "provider/daytona", true},
		{"internal/demo/samplerunner", "internal/providers", false},
		{"internal/providers", "internal/doctor/check", false},
		{"examples/go", "provider/daytona", false},
		{"internal/reaper", "internal/intake", true},
		{"internal/config", "internal/reaper", true},
		{"internal/intake/socket", "internal/intake", false},
		{"internal/metrics", "internal/sidecar", true},
		{"cmd/tether", "internal/sidecar", false},
		{"internal/sidecar", "internal/intake/socket", false},
	} {
		if got := forbidden(c.from, c.to) != ""; got != c.bad {
			t.Errorf("%s -> %s: forbidden %v, want %v", c.from, c.to, got, c.bad)
		}
	}
}
