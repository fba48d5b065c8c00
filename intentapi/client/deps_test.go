package client

import (
	"os/exec"
	"strings"
	"testing"
)

// A Go runner that imports the client links what it speaks, never the
// journal's storage: no bbolt, nothing of tether's but the intent
// vocabulary and the API's JSON.
func TestClientLinksNoStorage(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	allowed := map[string]bool{
		"github.com/tether-run/tether/intent":           true,
		"github.com/tether-run/tether/intentapi":        true,
		"github.com/tether-run/tether/intentapi/client": true,
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.Contains(dep, "bbolt") || (strings.HasPrefix(dep, "github.com/tether-run/tether/") && !allowed[dep]) {
			t.Errorf("intentapi/client links %s", dep)
		}
	}
}
