package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// events is go test -json as the go command writes it for three packages:
// one that passes with a subtest and a skipped test, one whose test fails,
// and one without test files.
const events = `{"Action":"start","Package":"github.com/tether-run/tether/a"}
{"Action":"run","Package":"github.com/tether-run/tether/a","Test":"TestOne"}
{"Action":"output","Package":"github.com/tether-run/tether/a","Test":"TestOne","Output":"=== RUN   TestOne\n"}
{"Action":"run","Package":"github.com/tether-run/tether/a","Test":"TestOne/sub"}
{"Action":"pass","Package":"github.com/tether-run/tether/a","Test":"TestOne/sub","Elapsed":0}
{"Action":"pass","Package":"github.com/tether-run/tether/a","Test":"TestOne","Elapsed":0.01}
{"Action":"run","Package":"github.com/tether-run/tether/a","Test":"TestDocker"}
{"Action":"output","Package":"github.com/tether-run/tether/a","Test":"TestDocker","Output":"    a_test.go:9: SKIP: no Docker engine\n"}
{"Action":"output","Package":"github.com/tether-run/tether/a","Test":"TestDocker","Output":"--- SKIP: TestDocker (0.00s)\n"}
{"Action":"skip","Package":"github.com/tether-run/tether/a","Test":"TestDocker","Elapsed":0}
{"Action":"output","Package":"github.com/tether-run/tether/a","Output":"ok  \tgithub.com/tether-run/tether/a\t0.02s\n"}
{"Action":"pass","Package":"github.com/tether-run/tether/a","Elapsed":0.02}
{"Action":"start","Package":"github.com/tether-run/tether/b"}
{"Action":"run","Package":"github.com/tether-run/tether/b","Test":"TestBroken"}
{"Action":"output","Package":"github.com/tether-run/tether/b","Test":"TestBroken","Output":"    b_test.go:5: want 1, got 2\n"}
{"Action":"fail","Package":"github.com/tether-run/tether/b","Test":"TestBroken","Elapsed":0.1}
{"Action":"fail","Package":"github.com/tether-run/tether/b","Elapsed":0.2}
{"Action":"start","Package":"github.com/tether-run/tether/c"}
{"Action":"output","Package":"github.com/tether-run/tether/c","Output":"?   \tgithub.com/tether-run/tether/c\t[no test files]\n"}
{"Action":"skip","Package":"github.com/tether-run/tether/c","Elapsed":0}
`

func TestSummary(t *testing.T) {
	var out bytes.Buffer
	s := newSummary(&out)
	if err := s.read(strings.NewReader(events)); err != nil {
		t.Fatal(err)
	}
	s.write(90*time.Second, []string{"/tmp/x/left-behind"})
	got := out.String()
	for _, want := range []string{
		"ok    a", "2 passed, 1 skipped",
		"--- FAIL: TestBroken (github.com/tether-run/tether/b, 0.10s)", "want 1, got 2",
		"FAIL  b", "a TestDocker: SKIP: no Docker engine",
		"FAIL: the tests left 1 entries in their temporary directory", "/tmp/x/left-behind",
		"tests: 2 passed, 1 failed, 1 skipped (1 of them subtests)\n",
		"packages: 1 passed, 1 failed, 1 without tests\n",
		"took 1m30s\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the summary does not say %q:\n%s", want, got)
		}
	}
}
