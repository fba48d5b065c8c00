package reaper_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/journal"
)

// TestReportIsBounded: thousands of intents left live give the counts, at
// most ReportLines lines naming them, and how many more there are.
func TestReportIsBounded(t *testing.T) {
	t.Parallel()
	var rep reaper.Report
	for i := range 5000 {
		rep.Unresolved = append(rep.Unresolved, reaper.Item{Name: fmt.Sprintf("tether-%d", i), ID: fmt.Sprint(i), State: intent.Pending, LastError: "why"})
	}
	for i := range 30 {
		rep.Foreign = append(rep.Foreign, reaper.Item{Name: fmt.Sprintf("tether-f%d", i), ID: fmt.Sprint(i)})
	}
	rep.Total = len(rep.Unresolved) + len(rep.Foreign)
	for _, limit := range []int{reaper.DefaultReportLines, 3, -1} {
		var b strings.Builder
		rep.WriteLines(&b, limit)
		out := b.String()
		want := max(limit, 0)
		if n := strings.Count(out, "  unresolved tether-"); n != want {
			t.Errorf("limit %d: %d unresolved lines, want %d:\n%s", limit, n, want, out)
		}
		if n := strings.Count(out, "  foreign tether-"); n != min(want, 30) {
			t.Errorf("limit %d: %d foreign lines, want %d:\n%s", limit, n, min(want, 30), out)
		}
		for _, s := range []string{"drain: 5030 intents", "5000 left live", "unresolved     5000", fmt.Sprintf("and %d more unresolved", 5000-want), "tether intent ls"} {
			if !strings.Contains(out, s) {
				t.Errorf("limit %d: report lacks %q:\n%s", limit, s, out)
			}
		}
		if lines := strings.Count(out, "\n"); lines > 10+2*want {
			t.Errorf("limit %d: %d lines", limit, lines)
		}
	}
}

// TestDrainLogsEachIntentLeftLiveOnce: an intent a drain cannot resolve is
// logged once per drain (not once per attempt and again in the summary).
func TestDrainLogsEachIntentLeftLiveOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	const n = 200
	var intents []intent.Intent
	for range n {
		// Declared under other credentials: left live at once, untouched.
		in, _, err := w.j.Create(context.Background(), intent.Declaration{Labels: scope, Provider: "daytona", Account: "daytona:another-account"})
		if err != nil {
			t.Fatal(err)
		}
		intents = append(intents, in)
	}
	for round := 1; round <= 2; round++ {
		ctx, cancel := w.drainCtx(30 * time.Second)
		rep := w.r.Drain(ctx, intents)
		cancel()
		if rep.Live() != n {
			t.Fatalf("round %d: %d left live, want %d", round, rep.Live(), n)
		}
		for _, in := range intents {
			if c := countRecords(w.logs.String(), "intent left live", in.ID); c != round {
				t.Fatalf("round %d: intent %s logged as left live at warn level %d times, want %d", round, in.ID, c, round)
			}
		}
	}
}

// countRecords counts the log records above debug level with message msg
// that name intent id.
func countRecords(logs, msg, id string) int {
	n := 0
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "level=DEBUG") || !strings.Contains(line, `msg="`+msg+`"`) {
			continue
		}
		if strings.Contains(line, "intent="+id) {
			n++
		}
	}
	return n
}

// TestNoProviderDoesNoWork: without a provider neither the boot replay nor
// the drain reads or writes a single intent; the drain reports their number
// and why, in two lines, and every intent stays exactly as it was.
func TestNoProviderDoesNoWork(t *testing.T) {
	t.Parallel()
	j, err := journal.Open(filepath.Join(t.TempDir(), "journal.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	const n = 3000
	// Created by 30 writers at once, so the journal's group commit shares
	// the fsyncs: this is the set-up, not what is measured.
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 30 {
				if _, _, err := j.Create(context.Background(), intent.Declaration{Labels: map[string]string{"i": fmt.Sprint(i)}, Provider: "daytona"}); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	before, err := j.Live()
	if err != nil {
		t.Fatal(err)
	}
	logs := &testutil.Buffer{}
	r := &reaper.Reaper{Journal: j, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))}

	ids, err := j.LiveIDs()
	if err != nil || len(ids) != n {
		t.Fatalf("LiveIDs: %d ids, %v", len(ids), err)
	}
	r.Replay(context.Background(), ids)
	var out strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := r.DrainLive(ctx, j, &out)
	if !errors.Is(err, reaper.ErrUnresolved) || rep.Live() != n {
		t.Fatalf("DrainLive: live %d, err %v; want %d and ErrUnresolved", rep.Live(), err, n)
	}
	if lines := strings.Count(out.String(), "\n"); lines != 2 || !strings.Contains(out.String(), fmt.Sprintf("%d left live", n)) || !strings.Contains(out.String(), "no provider") {
		t.Errorf("report:\n%s", out.String())
	}
	if lines := strings.Count(logs.String(), "\n"); lines > 1 {
		t.Errorf("%d log lines, want at most 1:\n%s", lines, logs.String())
	}
	after, err := j.Live()
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != n {
		t.Fatalf("%d live after, want %d", len(after), n)
	}
	for i := range after {
		if !after[i].UpdatedAt.Equal(before[i].UpdatedAt) || after[i].LastError != before[i].LastError || after[i].Attempts != before[i].Attempts {
			t.Fatalf("intent %s was written: %+v, was %+v", after[i].ID, after[i], before[i])
		}
	}
}
