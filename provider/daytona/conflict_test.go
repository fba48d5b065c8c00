package daytona_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// TestConflictSaysWhichConflict: both 409s match ErrConflict, and each
// error says what the server said — a taken name is not reported as a
// state change in progress, nor the other way round.
func TestConflictSaysWhichConflict(t *testing.T) {
	_, p := testutil.Daytona(t, daytonatest.WithFaults(daytonatest.Faults{Starting: time.Hour}), daytonatest.WithCreateWait(0))
	ctx := context.Background()
	sb, err := p.Create(ctx, "tether-taken", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Create(ctx, "tether-taken", nil, nil)
	if !errors.Is(err, provider.ErrConflict) || !strings.Contains(err.Error(), "already exists") || strings.Contains(err.Error(), "state change") {
		t.Fatalf("create of a taken name: %v; want ErrConflict saying the name already exists, and nothing about a state change", err)
	}
	testutil.WaitFor(t, "starting", func() bool { got, _ := p.Get(ctx, sb.ID); return got.State == "starting" })
	err = p.Delete(ctx, sb.ID)
	if !errors.Is(err, provider.ErrConflict) || !strings.Contains(err.Error(), "state change in progress") || strings.Contains(err.Error(), "already exists") {
		t.Fatalf("delete while starting: %v; want ErrConflict saying a state change is in progress", err)
	}
}
