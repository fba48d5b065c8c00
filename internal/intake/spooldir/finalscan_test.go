package spooldir

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tether-run/tether/internal/intake"
)

// TestIntakeFinalScanCutShort: when FinalScanCtx has ended (tether run: the
// drain's deadline passed), the last scan takes nothing more and Run
// returns; the files stay in the spool for the next start, none is lost.
func TestIntakeFinalScanCutShort(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "spool")
	os.MkdirAll(dir, 0o700)
	j := openTemp(t)
	spoolWrite(t, dir, "001", `{"op":"intent","id":"late","labels":{}}`)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	final, cut := context.WithCancel(context.Background())
	cut()
	in := &Reader{Intake: &intake.Intake{Journal: j}, Dir: dir, WatchDelay: time.Hour, RescanInterval: time.Hour, FinalScanCtx: final}
	if err := in.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := j.Get("late"); err == nil {
		t.Fatal("the last scan took a file after FinalScanCtx ended")
	}
	if spoolEmpty(dir) {
		t.Fatal("the file is gone from the spool without being journaled")
	}
}
