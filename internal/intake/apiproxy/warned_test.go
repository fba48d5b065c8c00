package apiproxy

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/intake"
)

// A flood of creates under distinct bogus keys reports at most maxWarned
// accounts, and remembers no more.
func TestAccountWarningsBounded(t *testing.T) {
	var logs bytes.Buffer
	p, err := New(Config{Intake: &intake.Intake{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Accounts: map[string]string{intent.DefaultProvider: "tether's"}}, Name: "Daytona", Upstream: "http://127.0.0.1:1/api"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		p.CheckAccount(fmt.Sprint("bogus-", i))
		p.CheckAccount(fmt.Sprint("bogus-", i))
	}
	if n := strings.Count(logs.String(), "another Daytona account"); n != maxWarned {
		t.Errorf("%d warnings, want %d", n, maxWarned)
	}
	if len(p.warned) != maxWarned {
		t.Errorf("%d accounts remembered, want %d", len(p.warned), maxWarned)
	}
}
