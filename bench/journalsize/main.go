// Command journalsize measures what retention and compaction do to a
// journal of N finished intents: its size and the time journal.Open takes,
// full, after every intent is pruned (the file mostly free), at the open
// that compacts it, and after. The numbers in docs/benchmarks.md.
//
//	go run ./bench/journalsize -journal /tmp/j.db -n 100000
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/tether-run/tether/bench/internal/fill"
	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/journal"
)

func main() {
	path := flag.String("journal", "", "journal to create (must not exist)")
	n := flag.Int("n", 100000, "finished intents to journal")
	opens := flag.Int("opens", 5, "opens timed at each step (the median is reported)")
	flag.Parse()
	if err := run(*path, *n, *opens); err != nil {
		fmt.Fprintln(os.Stderr, "journalsize:", err)
		os.Exit(1)
	}
}

func run(path string, n, opens int) error {
	start := time.Now()
	if err := journalReleased(path, n); err != nil {
		return err
	}
	fmt.Printf("journaled and released %d intents in %s\n", n, time.Since(start).Round(time.Millisecond))
	fmt.Printf("%-34s %13s %12s\n", "step", "size", "open (median)")
	report := func(step string, d time.Duration) {
		fi, _ := os.Stat(path)
		fmt.Printf("%-34s %9d KiB %12s\n", step, fi.Size()>>10, d.Round(10*time.Microsecond))
	}
	report("full", timeOpens(path, opens))

	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		return err
	}
	start = time.Now()
	pruned, err := j.Prune(context.Background(), time.Now().Add(time.Second), 0)
	if err != nil {
		return err
	}
	took := time.Since(start)
	if err := j.Close(); err != nil {
		return err
	}
	fmt.Printf("pruned %d intents in %s (%d transactions of at most %d)\n", pruned, took.Round(time.Millisecond), (pruned+journal.DefaultPruneBatch-1)/journal.DefaultPruneBatch, journal.DefaultPruneBatch)
	fi, _ := os.Stat(path)
	fmt.Printf("%-34s %9d KiB %12s\n", "pruned, mostly free", fi.Size()>>10, "-")
	report("first open: compacts", timeOpens(path, 1))
	report("compacted", timeOpens(path, opens))
	return nil
}

// timeOpens opens and closes the journal k times and returns the median
// time of Open.
func timeOpens(path string, k int) time.Duration {
	var ds []time.Duration
	for range k {
		start := time.Now()
		j, err := journal.Open(path, journal.Options{})
		d := time.Since(start)
		if err != nil {
			fmt.Fprintln(os.Stderr, "journalsize:", err)
			os.Exit(1)
		}
		j.Close()
		ds = append(ds, d)
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// journalReleased journals n intents in a new journal, each released by
// the runner at once, with labels of a typical runner's size.
func journalReleased(path string, n int) error {
	return fill.Journal(path, n, func(j *journal.Journal, i int) error {
		in, _, err := j.Create(context.Background(), intent.Declaration{
			Labels: map[string]string{"bench": "retention", "n": fmt.Sprint(i), "team": strings.Repeat("t", 32), "job": strings.Repeat("j", 64)},
			Key:    fmt.Sprint("job-", i),
		})
		if err == nil {
			_, err = j.Release(in.ID, intent.OutcomeDeleted)
		}
		return err
	})
}
