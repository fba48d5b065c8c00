package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/tether-run/tether/internal/config"
	"github.com/tether-run/tether/provider/daytona"
	"github.com/tether-run/tether/provider/e2b"
)

// configDoc is docs/configuration.md, relative to this package.
var configDoc = filepath.Join("..", "..", "docs", "configuration.md")

// TestConfigurationDocIsCurrent regenerates docs/configuration.md from the
// flag sets the subcommands really parse, and fails when the file differs.
// TETHER_UPDATE_DOCS=1 go test -run ConfigurationDoc ./cmd/tether rewrites it.
func TestConfigurationDocIsCurrent(t *testing.T) {
	update := os.Getenv("TETHER_UPDATE_DOCS") == "1" // read before the TETHER_* variables are cleared
	got := generateConfigDoc(t)
	if update {
		if err := os.WriteFile(configDoc, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(configDoc)
	if err != nil {
		t.Fatalf("%v (TETHER_UPDATE_DOCS=1 go test -run ConfigurationDoc ./cmd/tether writes it)", err)
	}
	if string(want) != got {
		t.Fatalf("docs/configuration.md is not current: run TETHER_UPDATE_DOCS=1 go test -run ConfigurationDoc ./cmd/tether\n--- generated:\n%s", got)
	}
}

// docSetting is one row: a flag with one meaning, the subcommands that take
// it, and its default in each.
type docSetting struct {
	name, env, usage, kind string
	defaults               map[string]string // by subcommand
	commands               []string
}

var envInUsage = regexp.MustCompile(`\s*\(\$([A-Z0-9_]+)([^)]*)\)`)

// pathDefaults replaces defaults that depend on the user running tether.
var pathDefaults = map[string]string{
	"journal": "`" + config.StateDir + "/journal.db` as root, `uid-<uid>/journal.db` there when that directory is shared (see below)",
	"socket":  "`" + config.WellKnownSocket + "` as root (see below)",
	"spool":   "`" + config.RuntimeDir + "/spool` as root (see below)",
}

func generateConfigDoc(t *testing.T) string {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "TETHER_") {
			t.Setenv(k, "") // defaults, not this machine's environment
		}
	}
	saved := stdout
	stdout = io.Discard
	defer func() { stdout, flagSetSeen = saved, nil }()

	settings := map[string]*docSetting{} // by name + usage
	var order []string
	visit := func(command string) func(fs *flag.FlagSet) {
		return func(fs *flag.FlagSet) {
			fs.VisitAll(func(f *flag.Flag) {
				usage, env, more := f.Usage, "", ""
				if m := envInUsage.FindStringSubmatch(usage); m != nil {
					env, more = m[1], m[2]
					usage = envInUsage.ReplaceAllString(usage, "")
				}
				kind, _ := flag.UnquoteUsage(f)
				key := f.Name + "\x00" + usage
				s, ok := settings[key]
				if !ok {
					s = &docSetting{name: f.Name, env: env, usage: usage + more, kind: kind, defaults: map[string]string{}}
					settings[key] = s
					order = append(order, key)
				}
				def := "`" + f.DefValue + "`"
				if f.DefValue == "" {
					def = "(none)"
				}
				if p, ok := pathDefaults[f.Name]; ok && f.DefValue != "" {
					def = p
				}
				s.defaults[command] = def
				s.commands = append(s.commands, command)
			})
		}
	}
	run := func(command string, args ...string) {
		flagSetSeen = visit(command)
		name := strings.Fields(command)[0]
		if err := commands[name].Run(t.Context(), append(args, "-h")); err != nil {
			t.Fatalf("%s -h: %v", command, err)
		}
	}
	for _, name := range []string{"run", "drain", "status", "sweep", "doctor", "demo", "version"} {
		run(name)
	}
	subs := make([]string, 0, len(intentSubs))
	for s := range intentSubs {
		subs = append(subs, s)
	}
	sort.Strings(subs)
	for _, s := range subs {
		run("intent "+s, s)
	}

	var b strings.Builder
	b.WriteString(`# Configuration

<!-- Generated from the flag sets the subcommands parse, by
TETHER_UPDATE_DOCS=1 go test -run ConfigurationDoc ./cmd/tether — do not edit by hand;
a test fails when this file is not current. -->

Every setting is a flag of the subcommands that take it; most also have a
` + "`TETHER_*`" + ` environment variable. The flag wins over the variable, the variable over
the default. Each command validates its settings once, at start: a wrong one exits 125 with a
message that names it. ` + "`tether COMMAND -h`" + ` lists a command's own flags.

## Flags and variables

| flag | variable | default | taken by | what it does |
| --- | --- | --- | --- | --- |
`)
	for _, key := range order {
		s := settings[key]
		env := "—"
		if s.env != "" {
			env = "`" + s.env + "`"
		}
		flagName := "`--" + s.name
		if s.kind != "" {
			flagName += " " + s.kind
		}
		flagName += "`"
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", flagName, env, defaultsOf(s), commandsOf(s.commands), strings.ReplaceAll(s.usage, "|", "\\|"))
	}
	b.WriteString(`
## Default paths

The journal, the socket and the spool directory default to ` + "`" + config.StateDir + "`" + ` and
` + "`" + config.RuntimeDir + "`" + ` for root, and for any user who may write there (tether's image makes both
world-writable with the sticky bit). Otherwise the socket and spool go to
` + "`$XDG_RUNTIME_DIR/tether/`" + `, else everything goes under the user cache directory
(` + "`$XDG_CACHE_HOME/tether` or `$HOME/.cache/tether`" + `), else under ` + "`$TMPDIR/tether-<uid>`" + `. Paths are
made absolute once, at start.

In a directory every user may write (the image's ` + "`" + config.StateDir + "`" + `, ` + "`/tmp`" + `) the journal
goes into a subdirectory ` + "`uid-<uid>`" + ` tether creates for its user (mode 0700), as in
` + "`" + config.StateDir + "/uid-0/journal.db`" + `, so no other user can take its name first; a journal
the same user already keeps directly there (owned by it, writable by no one else) stays where it is.
The journal, its marker (` + "`journal.db.owner`" + `) and every temporary file beside it are opened
without following symbolic links and created exclusively; one owned by another uid, writable by
others, or not a regular file is refused (exit 125) with its path and the fix.

## Variables without a flag

| variable | read by | what it is |
| --- | --- | --- |
`)
	for _, row := range [][3]string{
		{daytona.EnvAPIKey, "run, drain, sweep, doctor", "Daytona API key; never logged"},
		{daytona.EnvJWTToken, "run, drain, sweep, doctor", "Daytona JWT, used when there is no API key (needs " + daytona.EnvOrganizationID + ")"},
		{daytona.EnvOrganizationID, "run, drain, sweep, doctor", "the organization a JWT acts in"},
		{daytona.EnvAPIURL, "run, drain, sweep, doctor", "Daytona API URL, default `" + daytona.DefaultAPIURL + "` (" + daytona.EnvServerURL + ", deprecated by Daytona, is read when it is unset); tether run points its child's at the Daytona API proxy unless `--daytona-proxy=false`, as `http://127.0.0.1:PORT/<secret>/api` with a secret drawn for each run (a request without it is refused)"},
		{daytona.EnvTarget, "run, drain, sweep", "region new sandboxes are created in (the proxy and the sample runner)"},
		{e2b.EnvAPIKey, "run, drain, sweep, doctor", "E2B API key (one team); never logged. Any of " + e2b.EnvAPIKey + ", " + e2b.EnvAPIURL + " and " + e2b.EnvDomain + " set turns E2B on (tether doctor checks it too)"},
		{e2b.EnvAPIURL, "run, drain, sweep, doctor", "E2B API URL, else `http://localhost:3000` with " + e2b.EnvDebug + "=true, else `https://api.<" + e2b.EnvDomain + ">` (`" + e2b.DefaultDomain + "`); tether run points its child's at the E2B API proxy unless `--e2b-proxy=false`"},
		{e2b.EnvDomain + ", " + e2b.EnvDebug, "run, drain, sweep, doctor", "as E2B's SDKs read them (above); from the environment alone, not the .env files"},
		{config.EnvOwner, "intent (without a socket)", "the journal's owner id; tether run gives it to its child"},
		{config.EnvSocket + ", " + config.EnvSpool + ", " + config.EnvLabels, "intent, status", "tether run gives them to its child: where to declare intents, and the scope labels (`k=v,k=v`)"},
		{config.EnvLeaseMinute, "run", "**tests only**: the length of a minute for lease mode's renewals and waits (default `1m`), to match a simulated Daytona whose minute is sped up; Daytona's minute is a minute"},
	} {
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", strings.ReplaceAll(row[0], ", ", "`, `"), row[1], row[2])
	}
	b.WriteString(`
## .env files

The ` + "`DAYTONA_*`" + ` variables are read as Daytona's TypeScript and Python SDKs read them: from the
environment (where a variable set empty still wins), else from ` + "`.env.local`" + `, else from ` + "`.env`" + `
in the working directory, which the child inherits. So the proxy forwards to the API URL of the
runner's ` + "`.env`" + ` and tether uses the credentials there, as the runner's SDK would. A file not owned
by root or tether's user, writable by group or others, or not a regular file is ignored with a
warning naming it. ` + "`tether run`" + ` says at start where each setting came from (` + "`env`, `.env.local`, `.env`" + `
or ` + "`default`" + `), never a value. The Go SDK reads only the environment.

## The start-up line

` + "`tether run`" + ` names in one info line the journal, socket and spool directory it uses (the fallbacks
above included) and the proxy's URL, its secret shown as ` + "`<secret>`" + `. It warns when the journal's
directory is in memory (tmpfs) or, in a container, on the container's own root overlay rather than
a volume (read from ` + "`/proc/self/mountinfo`" + `): a journal there does not outlive the container.
`)
	return b.String()
}

func defaultsOf(s *docSetting) string {
	seen := map[string][]string{}
	var vals []string
	for _, c := range s.commands {
		d := s.defaults[c]
		if _, ok := seen[d]; !ok {
			vals = append(vals, d)
		}
		seen[d] = append(seen[d], c)
	}
	if len(vals) == 1 {
		return vals[0]
	}
	parts := make([]string, len(vals))
	for i, v := range vals {
		parts[i] = v + " (" + strings.Join(seen[v], ", ") + ")"
	}
	return strings.Join(parts, "; ")
}

// commandsOf names the subcommands, "intent (every subcommand)" for all six.
func commandsOf(cmds []string) string {
	var out, intents []string
	for _, c := range cmds {
		if sub, ok := strings.CutPrefix(c, "intent "); ok {
			intents = append(intents, sub)
			continue
		}
		out = append(out, c)
	}
	switch {
	case len(intents) == len(intentSubs):
		out = append(out, "intent (all)")
	case len(intents) > 0:
		out = append(out, "intent "+strings.Join(intents, ", "))
	}
	return strings.Join(out, ", ")
}
