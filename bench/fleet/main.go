// Command fleet measures a fleet's rollout on one account: N `tether run`
// processes, each with a sample runner (`tether demo runner`) holding S
// sandboxes, against ONE simulated Daytona organization (or E2B team)
// whose quota is enforced as the real server enforces it, all SIGTERMed at
// once as a rollout, a node drain or a scale-down does. It reports what
// was deleted within the drain deadline against what the quota allows,
// each tether's time to exit, the calls and 429s the account answered,
// and for what the fleet left live, who catches it: the journal (a
// replay), the backstop (Daytona's auto-stop, E2B's timeout), the sweep.
// Then it runs the replay and the sweep and counts what they take.
//
//	go run ./bench/fleet                                  # N = 50, 100, 200 on both clouds
//	go run ./bench/fleet -replicas 20 -clouds daytona -v
//
// Everything is judged by the simulator's record and the answers it gave
// (a recorder in front of it), not by tether's reports.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	var cfg Config
	tether := flag.String("tether", "", "tether binary (default: built from this checkout)")
	clouds := flag.String("clouds", "daytona,e2b", "clouds to measure, comma-separated")
	replicas := flag.String("replicas", "50,100,200", "fleet sizes N, comma-separated")
	flag.IntVar(&cfg.Sandboxes, "sandboxes", 5, "sandboxes S each runner holds")
	flag.IntVar(&cfg.Limit, "limit", 100, "the account's quota: requests per window on each throttler (Daytona) or route (E2B) a drain uses; 0: none")
	flag.DurationVar(&cfg.Window, "window", 2*time.Second, "the quota's window")
	flag.DurationVar(&cfg.Latency, "latency", 50*time.Millisecond, "latency of every simulated API call")
	flag.DurationVar(&cfg.Grace, "grace", 3*time.Second, "TETHER_GRACE of every replica")
	flag.DurationVar(&cfg.DrainTimeout, "drain-timeout", 5*time.Second, "TETHER_DRAIN_TIMEOUT of every replica")
	flag.DurationVar(&cfg.KillAfter, "kill-after", 10*time.Second, "SIGKILL a replica still running this long after its SIGTERM (terminationGracePeriodSeconds)")
	flag.IntVar(&cfg.StartParallel, "start-parallel", 8, "replicas started at once (and replays run at once)")
	flag.BoolVar(&cfg.Catchers, "catchers", true, "after the fleet is gone, run the replay and the sweep and count what they take")
	flag.StringVar(&cfg.Dir, "dir", "", "keep the journals and logs under this directory (default: a temp dir, removed)")
	verbose := flag.Bool("v", false, "print progress")
	flag.Parse()
	if *verbose {
		cfg.Log = os.Stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, *tether, *clouds, *replicas, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg Config, tether, clouds, replicas string, out io.Writer) error {
	if tether == "" {
		dir, err := os.MkdirTemp("", "fleet-bin")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		tether = filepath.Join(dir, "tether")
		build := exec.Command("go", "build", "-o", tether, "github.com/tether-run/tether/cmd/tether")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("build tether: %w", err)
		}
	}
	cfg.Tether = tether
	var results []Result
	for _, c := range strings.Split(clouds, ",") {
		for _, n := range strings.Split(replicas, ",") {
			cfg.Cloud = c
			var err error
			if cfg.Replicas, err = strconv.Atoi(n); err != nil {
				return fmt.Errorf("-replicas %q: %w", replicas, err)
			}
			res, err := Run(ctx, cfg)
			if err != nil {
				return fmt.Errorf("%s N=%d: %w", c, cfg.Replicas, err)
			}
			results = append(results, res)
		}
	}
	writeTables(out, results)
	return nil
}

// writeTables prints the drain and the catchers as Markdown tables.
func writeTables(w io.Writer, rs []Result) {
	if len(rs) == 0 {
		return
	}
	c := rs[0].Config
	fmt.Fprintf(w, "%d sandboxes per replica; quota %d per %s on each throttler/route; API latency %s; grace %s, drain deadline %s, SIGKILL at %s\n\n",
		c.Sandboxes, c.Limit, c.Window, c.Latency, c.Grace, c.DrainTimeout, c.KillAfter)
	fmt.Fprintln(w, "| cloud | N | sandboxes | ideal gone by deadline (with a read each) | gone by deadline | x ideal (x with a read each) | gone at last exit | last delete (ideal: all) | tether exit median / p99 / max | starved | calls / sandbox | 429s | load |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
	ratio := func(gone, ideal int) float64 {
		if ideal <= 0 {
			return 1
		}
		return float64(gone) / float64(ideal)
	}
	for _, r := range rs {
		calls := float64(r.Served+r.Refused) / float64(max(1, r.Created))
		fmt.Fprintf(w, "| %s | %d | %d | %d (%d) | %d | %.2f (%.2f) | %d | %s (%s) | %s / %s / %s | %d | %.2f (%.2f served) | %d | %s |\n",
			r.Cloud, r.Replicas, r.Created, r.IdealGone, r.IdealPaired, r.GoneByDeadline, ratio(r.GoneByDeadline, r.IdealGone), ratio(r.GoneByDeadline, r.IdealPaired), r.GoneAtExit,
			sec(r.LastDelete), sec(r.IdealAll),
			sec(quantile(r.TetherExit, 0.5)), sec(quantile(r.TetherExit, 0.99)), sec(quantile(r.TetherExit, 1)),
			r.Starved, calls, float64(r.Served)/float64(max(1, r.Created)), r.Refused, r.Load)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| cloud | N | confirmed gone by the tethers | left live | in a journal | backstopped | of which handed off (reported) | sweepable | no catcher | replay deleted (time) | sweep deleted | live at the end | tethers killed |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range rs {
		fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %d | %d (%d) | %d | %d | %d (%s) | %d | %d | %d |\n",
			r.Cloud, r.Replicas, r.Confirmed, r.LeftLive, r.Journaled, r.Backstopped, r.HandedOff, r.ReportedHandOff, r.Sweepable, r.NoCatcher,
			r.ReplayGone, sec(r.ReplayTime), r.SweepGone, r.FinalLive, r.Killed)
	}
}

func sec(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }
