// Command counts runs `go test -json` with the arguments it is given and
// says what ran: a line per package as it ends, the output of every test
// that failed, and at the end how many tests passed, failed and were
// skipped, how many packages passed, failed or had no tests, what was
// skipped and why, and how long it all took. .ci/test runs it for the whole
// suite (go test -race ./...); its exit code is go test's.
//
// The tests run with TMPDIR set to a directory of their own (world
// searchable with the sticky bit, like /tmp, as tests acting as another uid
// need), and whatever they leave there is listed and fails the run: every
// test cleans up what it makes.
//
//	go run ./test/counts [go test flags and packages]
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	start := time.Now()
	tmp, err := os.MkdirTemp("", "tether-tests-")
	if err != nil {
		fmt.Fprintln(stderr, "counts:", err)
		return 2
	}
	defer os.RemoveAll(tmp)
	// Tests that act as another uid (setpriv) reach their files under it.
	if err := os.Chmod(tmp, 0o1777); err != nil {
		fmt.Fprintln(stderr, "counts:", err)
		return 2
	}
	cmd := exec.Command("go", append([]string{"test", "-json"}, args...)...)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(stderr, "counts:", err)
		return 2
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(stderr, "counts:", err)
		return 2
	}
	s := newSummary(stdout)
	if err := s.read(out); err != nil {
		fmt.Fprintln(stderr, "counts: reading go test -json:", err)
	}
	code := 0
	if err := cmd.Wait(); err != nil {
		code = 1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
	}
	left := leftovers(tmp)
	s.write(time.Since(start), left)
	if code == 0 && len(left) > 0 {
		code = 1
	}
	return code
}

// leftovers lists what the tests left in their temporary directory.
func leftovers(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, e := range entries {
		out = append(out, filepath.Join(dir, e.Name()))
	}
	return out
}

// event is one line of go test -json (cmd/test2json's TestEvent, and the
// go command's build events).
type event struct {
	Action      string
	Package     string
	Test        string
	Elapsed     float64
	Output      string
	ImportPath  string
	FailedBuild string
}

// summary counts the events of one go test -json stream.
type summary struct {
	w io.Writer

	passed, failed, skipped int // tests, subtests included
	subtests                int // of all tests counted, those that are subtests
	pkgPassed, pkgFailed    int
	pkgNoTests              int

	running map[string][]string // package/test → its output so far
	pkgOut  map[string][]string // package → output outside its tests
	pkgRun  map[string]*pkgCount
	skips   []string // "pkg Test: reason"
}

type pkgCount struct{ passed, failed, skipped int }

func newSummary(w io.Writer) *summary {
	return &summary{w: w, running: map[string][]string{}, pkgOut: map[string][]string{}, pkgRun: map[string]*pkgCount{}}
}

// maxOutputLines bounds what is kept of one test's or package's output.
const maxOutputLines = 400

func keep(lines []string, l string) []string {
	if len(lines) == maxOutputLines {
		return append(lines[:maxOutputLines-1], "… (output cut)\n")
	}
	return append(lines, l)
}

func (s *summary) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			// Not an event (go test's own line): pass it on.
			fmt.Fprintln(s.w, sc.Text())
			continue
		}
		s.add(e)
	}
	return sc.Err()
}

func (s *summary) add(e event) {
	key := e.Package + " " + e.Test
	pc := s.pkgRun[e.Package]
	if pc == nil && e.Package != "" {
		pc = &pkgCount{}
		s.pkgRun[e.Package] = pc
	}
	switch e.Action {
	case "build-output":
		fmt.Fprint(s.w, e.Output)
	case "output":
		if e.Test != "" {
			s.running[key] = keep(s.running[key], e.Output)
		} else {
			s.pkgOut[e.Package] = keep(s.pkgOut[e.Package], e.Output)
		}
	case "pass", "fail", "skip":
		if e.Test == "" {
			s.endPackage(e, pc)
			return
		}
		if strings.Contains(e.Test, "/") {
			s.subtests++
		}
		switch e.Action {
		case "pass":
			s.passed++
			pc.passed++
		case "fail":
			s.failed++
			pc.failed++
			fmt.Fprintf(s.w, "--- FAIL: %s (%s, %.2fs)\n", e.Test, e.Package, e.Elapsed)
			for _, l := range s.running[key] {
				fmt.Fprint(s.w, "    "+l)
			}
		case "skip":
			s.skipped++
			pc.skipped++
			s.skips = append(s.skips, fmt.Sprintf("%s %s: %s", short(e.Package), e.Test, skipReason(s.running[key])))
		}
		delete(s.running, key)
	}
}

func (s *summary) endPackage(e event, pc *pkgCount) {
	out := s.pkgOut[e.Package]
	delete(s.pkgOut, e.Package)
	switch {
	case e.Action == "skip" || e.Action == "pass" && pc.passed+pc.failed+pc.skipped == 0 && noTests(out):
		s.pkgNoTests++
		return
	case e.Action == "pass":
		s.pkgPassed++
		fmt.Fprintf(s.w, "ok    %-55s %6.1fs  %s\n", short(e.Package), e.Elapsed, pkgLine(pc))
		// A package that passed but said why something did not run
		// (a TestMain's SKIP line) says it here.
		for _, l := range out {
			if strings.HasPrefix(l, "SKIP") {
				fmt.Fprint(s.w, "      "+l)
				s.skips = append(s.skips, fmt.Sprintf("%s: %s", short(e.Package), strings.TrimSpace(l)))
			}
		}
	default:
		s.pkgFailed++
		why := ""
		if e.FailedBuild != "" {
			why = " (build failed: " + e.FailedBuild + ")"
		}
		fmt.Fprintf(s.w, "FAIL  %-55s %6.1fs  %s%s\n", short(e.Package), e.Elapsed, pkgLine(pc), why)
		for _, l := range out {
			fmt.Fprint(s.w, "    "+l)
		}
		// Tests still running when the package failed (a panic, a timeout).
		var stuck []string
		for k := range s.running {
			if strings.HasPrefix(k, e.Package+" ") {
				stuck = append(stuck, k)
			}
		}
		sort.Strings(stuck)
		for _, k := range stuck {
			fmt.Fprintf(s.w, "--- unfinished: %s\n", strings.TrimPrefix(k, e.Package+" "))
			for _, l := range s.running[k] {
				fmt.Fprint(s.w, "    "+l)
			}
			delete(s.running, k)
		}
	}
}

func noTests(out []string) bool {
	for _, l := range out {
		if strings.Contains(l, "[no test files]") || strings.Contains(l, "no tests to run") {
			return true
		}
	}
	return false
}

func pkgLine(pc *pkgCount) string {
	l := fmt.Sprintf("%d passed", pc.passed)
	if pc.failed > 0 {
		l += fmt.Sprintf(", %d failed", pc.failed)
	}
	if pc.skipped > 0 {
		l += fmt.Sprintf(", %d skipped", pc.skipped)
	}
	return l
}

// short is a package path without the module's prefix.
func short(pkg string) string {
	const module = "github.com/tether-run/tether"
	if pkg == module {
		return "."
	}
	return strings.TrimPrefix(pkg, module+"/")
}

// skipReason is what a skipped test said last: t.Skip's message.
func skipReason(out []string) string {
	for i := len(out) - 1; i >= 0; i-- {
		l := strings.TrimSpace(out[i])
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- SKIP") {
			continue
		}
		// t.Skip's lines are "file.go:12: reason".
		if i := strings.Index(l, ": "); i > 0 && strings.Contains(l[:i], ".go:") {
			l = l[i+2:]
		}
		return l
	}
	return "(no reason given)"
}

// maxSkipLines bounds the skipped tests listed by name.
const maxSkipLines = 30

func (s *summary) write(took time.Duration, left []string) {
	w := s.w
	fmt.Fprintln(w)
	if len(s.skips) > 0 {
		fmt.Fprintf(w, "skipped (%d):\n", len(s.skips))
		for i, l := range s.skips {
			if i == maxSkipLines {
				fmt.Fprintf(w, "  … and %d more\n", len(s.skips)-i)
				break
			}
			fmt.Fprintln(w, "  "+l)
		}
	}
	if len(left) > 0 {
		fmt.Fprintf(w, "FAIL: the tests left %d entries in their temporary directory (every test must remove what it makes):\n", len(left))
		for _, l := range left {
			fmt.Fprintln(w, "  "+l)
		}
	}
	fmt.Fprintf(w, "tests: %d passed, %d failed, %d skipped (%d of them subtests)\n", s.passed, s.failed, s.skipped, s.subtests)
	fmt.Fprintf(w, "packages: %d passed, %d failed, %d without tests\n", s.pkgPassed, s.pkgFailed, s.pkgNoTests)
	fmt.Fprintf(w, "took %s\n", took.Round(time.Second))
}
