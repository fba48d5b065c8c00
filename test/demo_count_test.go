package e2e_test

import (
	"bytes"
	"context"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestDemoCountsLostCreates: the demo's "Daytona, ...: N sandboxes alive"
// lines count every sandbox the simulated Daytona holds, the creates whose
// answer was lost (the runner never learned their id) included.
func TestDemoCountsLostCreates(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), exitBound*2)
	defer cancel()
	const n = 6
	cmd := exec.CommandContext(ctx, bin.tether, "demo", "--sandboxes", strconv.Itoa(n), "--faults", "create-lost=0.4,seed=3")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("tether demo: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	out := stdout.String()
	alive := regexp.MustCompile(`Daytona, (running|leaked): (\d+) sandboxes alive`)
	counts := alive.FindAllStringSubmatch(out, -1)
	if len(counts) != 2 {
		t.Fatalf("want the running and leaked counts:\n%s", out)
	}
	for _, c := range counts {
		// Every create either succeeded or was lost after Daytona made the
		// sandbox (the only fault here): all n exist.
		if c[2] != strconv.Itoa(n) {
			t.Errorf("%q: want %d alive, the lost creates included:\n%s", c[0], n, out)
		}
	}
	if !strings.Contains(out, "a lost create") {
		t.Fatalf("no lost create with this seed: the test proves nothing:\n%s", out)
	}
	if !strings.Contains(out, "after the replay: 0 sandboxes alive") {
		t.Errorf("the replay left sandboxes:\n%s", out)
	}
}
