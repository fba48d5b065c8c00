package examples_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// snippetDocs are the docs whose shell, Node and Python blocks must run
// (globs, relative to this directory): every Markdown file of the
// repository. A block runs in its doc's directory, since a doc's relative
// paths are relative to it.
var snippetDocs = []string{"../README.md", "../docs/*.md", "README.md", "*/README.md"}

// tryItAddr is the address the docs' blocks use for the simulated Daytona:
// the default of `tether demo daytona`; tryItE2BAddr is the simulated E2B
// API's, `tether demo e2b`'s. Each block gets its own on a free port,
// written into the block in its place.
const (
	tryItAddr    = "127.0.0.1:3986"
	tryItE2BAddr = "127.0.0.1:3987"
)

// tryItImage is the tag the blocks that run on the Docker engine build the
// tether image as; each such block gets a tag of its own in its place,
// removed after it.
const tryItImage = "tether:try"

// snippetLangs maps a fence's info string to the interpreter of its block.
var snippetLangs = map[string]string{
	"sh": "sh", "bash": "sh", "shell": "sh",
	"js": "node", "javascript": "node", "mjs": "node",
	"python": "python3", "py": "python3",
}

// A snippet is one fenced block of a doc, with the marker written on the
// line before its fence, if any:
//
//	<!-- snippet: skip (REASON) -->   not runnable here; REASON says why
//	<!-- snippet: fragment -->        needs context: run wrapped (fragments below)
//	<!-- snippet: docker -->          runs as written where the Docker engine is up
//
// A block without a marker runs as written.
type snippet struct {
	doc    string // path, relative to this directory
	line   int    // of the fence
	lang   string // the fence's info string
	marker string // "", "skip", "fragment" or "docker"
	reason string // of a skip
	body   string
}

var markerRE = regexp.MustCompile(`^<!-- snippet: (skip|fragment|docker)(?: \((.+)\))? -->$`)

// docSnippets returns the blocks of snippetLangs' languages in doc.
func docSnippets(t *testing.T, doc string) []snippet {
	t.Helper()
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	var out []snippet
	lines := strings.Split(string(b), "\n")
	prev := "" // the last non-blank line before the fence
	for i := 0; i < len(lines); i++ {
		lang, isFence := strings.CutPrefix(lines[i], "```")
		if !isFence {
			if s := strings.TrimSpace(lines[i]); s != "" {
				prev = s
			}
			continue
		}
		start := i
		var body []string
		for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
			body = append(body, lines[i])
		}
		if _, ok := snippetLangs[strings.TrimSpace(lang)]; ok {
			sn := snippet{doc: doc, line: start + 1, lang: strings.TrimSpace(lang), body: strings.Join(body, "\n") + "\n"}
			if m := markerRE.FindStringSubmatch(prev); m != nil {
				sn.marker, sn.reason = m[1], m[2]
			} else if strings.HasPrefix(prev, "<!-- snippet") {
				t.Errorf("%s:%d: unknown marker %q; want <!-- snippet: skip (REASON) -->, <!-- snippet: fragment --> or <!-- snippet: docker -->", doc, start, prev)
			}
			out = append(out, sn)
		}
		prev = ""
	}
	return out
}

// fragmentSteps are the steps fragments leave to the reader, by the exact
// comment line that stands for each: the test runs the line below it after
// that comment. Each creates the sandbox on the simulated Daytona with the
// name and labels of the intent the fragment just declared, through the
// create function of fragmentPreludes, into the variable the fragment uses
// next. Each of befores, when set, runs the fragment once more with that
// line before it (a context its prose gives it); the fragment always runs
// as written too.
var fragmentSteps = map[string]struct {
	befores []string
	step    string
}{
	// README.md, the intent API.
	`# …create it on Daytona with that name and those labels, then report the sandbox's id ($SB):`: {
		step: `SB=$(create_sandbox "$(printf '%s' "$in" | jq -r .name)" "$(printf '%s' "$in" | jq -c .labels)")`},
	// README.md, the tether intent CLI: under tether run (over the socket)
	// and with no socket set (through the spool), the key is the handle.
	`# …create the sandbox with that name and labels, then:`: {
		befores: []string{`unset TETHER_SOCKET`},
		step:    `sandbox_id=$(create_sandbox tether-job-7 "{\"step\":\"build\",\"tether-owner\":\"$TETHER_OWNER\",\"tether-intent\":\"job-7\"}")`},
	// docs/protocol.md, curl.
	`# create the sandbox with .name and .labels, then, with its id in $SB:`: {
		step: `SB=$(create_sandbox "$(printf '%s' "$in" | jq -r .name)" "$(printf '%s' "$in" | jq -c .labels)")`},
	// docs/protocol.md, Node.
	`// create the sandbox with intent.name and intent.labels, then:`: {
		step: `const sandbox = { id: await createSandbox(intent.name, intent.labels) };`},
	// docs/protocol.md, Python.
	`# create the sandbox with intent["name"] and intent["labels"], then:`: {
		step: `sandbox_id = create_sandbox(intent["name"], intent["labels"])`},
	// docs/protocol.md, the tether CLI.
	`# create the sandbox with {"name":"$name","labels":$labels}, then:`: {
		step: `sandbox_id=$(create_sandbox "$name" "$labels")`},
}

// fragmentPreludes define, in each language, the create function of
// fragmentSteps: POST /sandbox on $DAYTONA_API_URL, returning the id. In
// shell, curl also fails on an HTTP error answer (the docs' `curl -s` would
// go on), so a call tether refuses fails the fragment.
var fragmentPreludes = map[string]string{
	"sh": `curl() { command curl --fail-with-body "$@"; }
create_sandbox() {
  command curl -sS --fail-with-body -X POST "$DAYTONA_API_URL/sandbox" -H "Authorization: Bearer $DAYTONA_API_KEY" \
    -H 'Content-Type: application/json' -d "{\"name\":\"$1\",\"labels\":$2}" |
    grep -o '"id":"[^"]*"' | head -n 1 | cut -d '"' -f 4
}
`,
	"node": `async function createSandbox(name, labels) {
  const res = await fetch(process.env.DAYTONA_API_URL + '/sandbox', { method: 'POST',
    headers: { Authorization: 'Bearer ' + process.env.DAYTONA_API_KEY, 'Content-Type': 'application/json' },
    body: JSON.stringify({ name, labels }), signal: AbortSignal.timeout(30000) });
  if (!res.ok) throw new Error('create: ' + res.status + ' ' + await res.text());
  return (await res.json()).id;
}
`,
	"python3": `import json as _json, os as _os, urllib.request as _request
def create_sandbox(name, labels):
    req = _request.Request(_os.environ["DAYTONA_API_URL"] + "/sandbox", method="POST",
        data=_json.dumps({"name": name, "labels": labels}).encode(),
        headers={"Authorization": "Bearer " + _os.environ["DAYTONA_API_KEY"], "Content-Type": "application/json"})
    with _request.urlopen(req, timeout=30) as r:
        return _json.load(r)["id"]
`,
}

// wrapFragment returns the fragment with its create step filled in after
// the comment that stands for it, the prelude before it: as written, then
// once after each of the step's befores (keyed by that line; "" is as
// written). False when no line of it is a step fragmentSteps knows.
func wrapFragment(sn snippet) (map[string]string, bool) {
	lang := snippetLangs[sn.lang]
	lines := strings.Split(sn.body, "\n")
	for i, l := range lines {
		st, ok := fragmentSteps[strings.TrimSpace(l)]
		if !ok {
			continue
		}
		body := strings.Join(lines[:i+1], "\n") + "\n" + st.step + "\n" + strings.Join(lines[i+1:], "\n")
		scripts := map[string]string{"": fragmentPreludes[lang] + body}
		for _, before := range st.befores {
			scripts[before] = fragmentPreludes[lang] + before + "\n" + body
		}
		return scripts, true
	}
	return nil, false
}

// snippetTools are the commands a shell block may use that a machine may
// lack; a block that uses a missing one is skipped, saying so.
var snippetTools = []string{"curl", "jq", "node", "promtool", "python3", "timeout"}

// TestDocSnippets runs every shell, Node and Python block of the docs
// (snippetDocs):
//
//   - a block without a marker runs as written, in its doc's directory, with
//     the tether just built first on PATH, against a `tether demo daytona`
//     of its own (its URL written in place of 127.0.0.1:3986, and exported
//     as DAYTONA_API_URL with its key), with TETHER_JOURNAL, TETHER_SOCKET
//     and TETHER_SPOOL in a temporary directory. It must exit 0; when it
//     ends with `tether demo daytona ls` (the "Try it locally" blocks), by
//     the simulator's record some sandboxes were created, every one was
//     deleted, and tether deleted some;
//   - a fragment runs as the child of `tether run` against the simulated
//     Daytona (its proxy off, so the fragment's own create reaches it), with
//     the create step it leaves to the reader filled in (fragmentSteps). By
//     the journal and the simulator's record, every intent it declared was
//     observed with a sandbox created under the intent's name and labels,
//     and ended released or gone, and a gone one's sandbox is destroyed;
//   - a block marked skip is not run; its marker must give a reason.
//
// A block that is none of these fails the test: a new block must run, or
// say why it cannot.
func TestDocSnippets(t *testing.T) {
	t.Parallel()
	var docs []string
	for _, g := range snippetDocs {
		m, err := filepath.Glob(g)
		if err != nil || len(m) == 0 {
			t.Fatalf("%s matches no doc (%v)", g, err)
		}
		docs = append(docs, m...)
	}
	var ran int
	for _, doc := range docs {
		for _, sn := range docSnippets(t, doc) {
			// Named from the repository's root.
			rel, ok := strings.CutPrefix(doc, "../")
			if !ok {
				rel = "examples/" + doc
			}
			name := fmt.Sprintf("%s:%d", rel, sn.line)
			switch sn.marker {
			case "skip":
				if strings.TrimSpace(sn.reason) == "" {
					t.Errorf("%s: a skipped block must say why: <!-- snippet: skip (REASON) -->", name)
				}
				continue
			case "fragment":
				scripts, ok := wrapFragment(sn)
				if !ok {
					t.Errorf("%s: a fragment with no create step the test knows: add its comment line to fragmentSteps, or mark it <!-- snippet: skip (REASON) -->", name)
					continue
				}
				for before, script := range scripts {
					ran++
					sub := name
					if before != "" {
						sub += " after " + before
					}
					t.Run(sub, func(t *testing.T) {
						t.Parallel()
						needTools(t, sn, script)
						runFragment(t, sn, script)
					})
				}
			case "docker":
				ran++
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					needTools(t, sn, sn.body)
					if err := exec.Command("docker", "info").Run(); err != nil {
						t.Skipf("SKIP: no Docker engine (docker info: %v): the block at %s:%d did not run", err, sn.doc, sn.line)
					}
					runSnippet(t, sn)
				})
			default:
				ran++
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					needTools(t, sn, sn.body)
					runSnippet(t, sn)
				})
			}
		}
	}
	if ran == 0 {
		t.Fatal("no block of the docs ran")
	}
}

// needTools skips the block when its interpreter, or a tool it uses, is
// not installed.
func needTools(t *testing.T, sn snippet, script string) {
	t.Helper()
	tools := []string{snippetLangs[sn.lang]}
	if tools[0] == "sh" {
		for _, tool := range snippetTools {
			if regexp.MustCompile(`(^|[\s|($])` + tool + `\s`).MatchString(script) {
				tools = append(tools, tool)
			}
		}
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("SKIP: %s is not installed: the block at %s:%d did not run", tool, sn.doc, sn.line)
		}
	}
}

// snippetFile writes script where its interpreter can run it: a Node
// fragment is an ES module (the docs' Node uses top-level await).
func snippetFile(t *testing.T, dir string, sn snippet, script string) []string {
	t.Helper()
	interp := snippetLangs[sn.lang]
	ext := map[string]string{"sh": ".sh", "node": ".mjs", "python3": ".py"}[interp]
	path := filepath.Join(dir, "snippet"+ext)
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	if interp == "sh" {
		return []string{"sh", "-e", path}
	}
	return []string{interp, path}
}

// snippetEnv is the environment without the caller's TETHER_*, DAYTONA_*
// and E2B_* settings, the built tether first on PATH, plus kv.
func snippetEnv(kv ...string) []string {
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "TETHER_") && !strings.HasPrefix(e, "DAYTONA_") && !strings.HasPrefix(e, "E2B_") && !strings.HasPrefix(e, "PATH=") {
			env = append(env, e)
		}
	}
	return append(append(env, "PATH="+tetherDir+":"+os.Getenv("PATH"), "TETHER_LOG_LEVEL=warn"), kv...)
}

// runBounded runs cmd, failing the test if it does not end within bound.
func runBounded(t *testing.T, cmd *exec.Cmd, bound time.Duration) ([]byte, error) {
	t.Helper()
	cmd.WaitDelay = time.Second
	done := make(chan struct{})
	var out []byte
	var err error
	go func() {
		out, err = cmd.CombinedOutput()
		close(done)
	}()
	select {
	case <-done:
		return out, err
	case <-time.After(bound):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%s did not finish within %s:\n%s", cmd, bound, out)
		return nil, nil
	}
}

func runSnippet(t *testing.T, sn snippet) {
	addr := startLocalSim(t, "daytona", "export DAYTONA_API_URL=http://", "/api")
	script := strings.ReplaceAll(sn.body, tryItAddr, addr)
	var e2bAddr string
	if strings.Contains(sn.body, tryItE2BAddr) {
		e2bAddr = startLocalSim(t, "e2b", "export E2B_API_URL=http://", "")
		script = strings.ReplaceAll(script, tryItE2BAddr, e2bAddr)
	}
	bound := 2 * waitBound
	if sn.marker == "docker" {
		// An image of its own, built and removed here (the build is a
		// static link of tether: longer than a block's usual bound).
		img := "tether-try:" + strings.ToLower(filepath.Base(shortTempDir(t)))
		script = strings.ReplaceAll(script, tryItImage, img)
		t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", img).Run() })
		bound = 5 * waitBound
	}
	dir := shortTempDir(t)
	argv := snippetFile(t, dir, sn, script)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = filepath.Dir(sn.doc)
	cmd.Env = snippetEnv(
		"DAYTONA_API_URL=http://"+addr+"/api", "DAYTONA_API_KEY=local-key",
		"TETHER_JOURNAL="+filepath.Join(dir, "journal.db"),
		"TETHER_SOCKET="+filepath.Join(dir, "t.sock"),
		"TETHER_SPOOL="+filepath.Join(dir, "spool"))
	out, err := runBounded(t, cmd, bound)
	if err != nil {
		t.Fatalf("the block failed: %v\n%s\n--- output:\n%s", err, script, out)
	}
	if e2bAddr != "" && strings.Contains(sn.body, tryItE2BAddr+"/_sim/sandboxes") {
		judgeE2B(t, e2bAddr, out)
	}
	if !strings.Contains(sn.body, "tether demo daytona ls") {
		return
	}
	m := regexp.MustCompile(`(?m)^(\d+) sandboxes, (\d+) never deleted$`).FindAllStringSubmatch(string(out), -1)
	if len(m) == 0 {
		t.Fatalf("the block's output has no tether demo daytona ls summary:\n%s", out)
	}
	last := m[len(m)-1]
	if last[1] == "0" || last[2] != "0" || !strings.Contains(string(out), "DELETE from tether") {
		t.Errorf("ls: %s sandboxes, %s never deleted; want some, all deleted, some by tether:\n%s", last[1], last[2], out)
	}
}

func runFragment(t *testing.T, sn snippet, script string) {
	w := newWorld(t)
	args := []string{"run", "--journal", w.journal, "--socket", filepath.Join(w.dir, "t.sock"),
		"--spool", filepath.Join(w.dir, "spool"), "--daytona-proxy=false", "--drain-timeout", "10s", "--"}
	cmd := exec.Command(filepath.Join(tetherDir, "tether"), append(args, snippetFile(t, w.dir, sn, script)...)...)
	cmd.Dir = w.dir
	cmd.Env = snippetEnv("DAYTONA_API_URL="+w.sim.URL, "DAYTONA_API_KEY="+daytonatest.DefaultKey)
	out, err := runBounded(t, cmd, 2*waitBound)
	if err != nil {
		t.Fatalf("the fragment failed under tether run: %v\n%s\n--- output:\n%s", err, script, out)
	}
	intents := w.intents()
	if len(intents) == 0 {
		t.Fatalf("the fragment declared no intent:\n%s\n--- output:\n%s", script, out)
	}
	sandboxes := map[string]bool{} // id → destroyed
	for _, sb := range w.sim.Sandboxes() {
		if sb.Labels[intent.LabelIntent] != "" && strings.Contains(sb.Name, "tether-"+sb.Labels[intent.LabelIntent]) {
			sandboxes[sb.ID] = sb.State == "destroyed" && sb.DeleteRequested
		}
	}
	for _, in := range intents {
		destroyed, created := sandboxes[in.SandboxID]
		switch {
		case in.SandboxID == "" || !created:
			t.Errorf("intent %s: observed sandbox %q, want one created with its name and labels", in.ID, in.SandboxID)
		case in.State != intent.Released && in.State != intent.Gone:
			t.Errorf("intent %s is %s, want released or gone", in.ID, in.State)
		case in.State == intent.Gone && !destroyed:
			t.Errorf("intent %s is gone but its sandbox %s is not destroyed", in.ID, in.SandboxID)
		}
	}
	if t.Failed() {
		t.Logf("the fragment as run:\n%s\n--- output:\n%s", script, out)
	}
}

// startLocalSim starts `tether demo KIND` (daytona or e2b) on a free
// loopback port and returns its address, from the export line it prints
// (prefix, the address, then suffix).
func startLocalSim(t *testing.T, kind, prefix, suffix string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(tetherDir, "tether"), "demo", kind, "--addr", "127.0.0.1:0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
				found <- strings.TrimSuffix(v, suffix)
			}
		}
		close(found)
	}()
	select {
	case addr, ok := <-found:
		if !ok {
			t.Fatalf("tether demo %s exited before printing its URL", kind)
		}
		return addr
	case <-time.After(waitBound):
		t.Fatalf("tether demo %s printed no URL within %s", kind, waitBound)
	}
	return ""
}

// judgeE2B reads the simulated E2B API's own record after a block that ends
// showing it: some sandboxes were created, and every one was killed (by a
// request: the block ends long before any sandbox's timeout).
func judgeE2B(t *testing.T, addr string, out []byte) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/_sim/sandboxes")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var record []struct{ ID, State string }
	if err := json.NewDecoder(resp.Body).Decode(&record); err != nil {
		t.Fatalf("the simulated E2B API's record: %v", err)
	}
	if len(record) == 0 {
		t.Fatalf("the block created no E2B sandbox:\n%s", out)
	}
	for _, sb := range record {
		if sb.State != "killed" {
			t.Errorf("E2B sandbox %s is %s after the block, want killed:\n%s", sb.ID, sb.State, out)
		}
	}
}

// shortTempDir: Unix socket paths are limited to about 100 bytes.
func shortTempDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "tx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// TestExamplesTryItLocally: every example directory has a README with a
// "Try it locally" section with a block TestDocSnippets runs (no marker, or
// docker), and the examples table names every directory once.
func TestExamplesTryItLocally(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	table, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") || e.Name() == "testdata" {
			continue
		}
		n++
		readme := filepath.Join(e.Name(), "README.md")
		b, err := os.ReadFile(readme)
		if err != nil {
			t.Errorf("examples/%s has no README: %v", e.Name(), err)
			continue
		}
		if n := strings.Count(string(table), "| ["+e.Name()+"/]("+e.Name()+"/) |"); n != 1 {
			t.Errorf("examples/README.md's table has %d rows for %s/, want 1", n, e.Name())
		}
		_, section, ok := strings.Cut(string(b), "\n## Try it locally\n")
		if !ok {
			t.Errorf("%s has no \"## Try it locally\" section", readme)
			continue
		}
		offset := strings.Count(string(b), "\n") - strings.Count(section, "\n")
		runs := false
		for _, sn := range docSnippets(t, readme) {
			if sn.line > offset && (sn.marker == "" || sn.marker == "docker") {
				runs = true
				break
			}
		}
		if !runs {
			t.Errorf("%s: its \"Try it locally\" section has no block TestDocSnippets runs", readme)
		}
	}
	if n == 0 {
		t.Fatal("no example directory")
	}
}
