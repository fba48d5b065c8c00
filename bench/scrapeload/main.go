// Command scrapeload measures what a flood of metrics scrapes costs a live
// runner: it runs a real `tether run --metrics-addr` on a journal holding
// N finished intents, whose child creates sandboxes through tether's Daytona
// API proxy (into a simulated Daytona) one every 20 ms, and fires 1,000
// scrapes at once at the endpoint. It prints the scrapes' latency and
// failures, and the creates' latency before and during the flood.
//
//	go run ./bench/scrapeload -tether /path/to/tether -n 100000
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tether-run/tether/bench/internal/fill"
	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

const envChild = "SCRAPELOAD_CHILD" // the child's output file

func main() {
	if out := os.Getenv(envChild); out != "" {
		if err := child(out); err != nil {
			fmt.Fprintln(os.Stderr, "scrapeload child:", err)
			os.Exit(1)
		}
		return
	}
	tether := flag.String("tether", "", "tether binary to measure")
	n := flag.Int("n", 10, "finished intents in the journal")
	scrapes := flag.Int("scrapes", 1000, "scrapes fired at once")
	timeout := flag.Duration("timeout", 60*time.Second, "a scrape not answered within this fails")
	journalFlag := flag.String("journal", "", "journal to use (filled with -n intents if missing; copied, never changed)")
	flag.Parse()
	if err := run(*tether, *n, *scrapes, *timeout, *journalFlag); err != nil {
		fmt.Fprintln(os.Stderr, "scrapeload:", err)
		os.Exit(1)
	}
}

func run(tether string, n, scrapes int, timeout time.Duration, journalPath string) error {
	if tether == "" {
		return fmt.Errorf("-tether is required")
	}
	dir, err := os.MkdirTemp("", "scrapeload")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if journalPath == "" {
		journalPath = filepath.Join(dir, "filled.db")
	}
	if _, err := os.Stat(journalPath); err != nil {
		if err := fillReleased(journalPath, n); err != nil {
			return err
		}
	}
	work := filepath.Join(dir, "journal.db")
	if err := copyFile(journalPath, work); err != nil {
		return err
	}
	sim := daytonatest.NewServer()
	defer sim.Close()
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	out := filepath.Join(dir, "creates.txt")
	stop := filepath.Join(dir, "stop")
	cmd := exec.Command(tether, "run", "--journal", work, "--socket", filepath.Join(dir, "s.sock"),
		"--spool", filepath.Join(dir, "spool"), "--metrics-addr", addr, "--drain-timeout", "2m", "--log-level", "warn",
		"--", os.Args[0])
	cmd.Env = append(os.Environ(), "DAYTONA_API_URL="+sim.URL, "DAYTONA_API_KEY="+daytonatest.DefaultKey,
		envChild+"="+out, "SCRAPELOAD_STOP="+stop)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	defer cmd.Process.Kill()
	url := "http://" + addr + "/metrics"
	if err := waitUp(url); err != nil {
		return err
	}
	time.Sleep(3 * time.Second) // creates before the flood
	rssBefore := vmRSS(cmd.Process.Pid)

	client := &http.Client{Timeout: timeout, Transport: &http.Transport{MaxIdleConnsPerHost: scrapes, MaxConnsPerHost: 0}}
	lat := make([]time.Duration, scrapes)
	var failed, refused atomic.Int64
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range scrapes {
		wg.Go(func() {
			<-gate
			start := time.Now()
			resp, err := client.Get(url)
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusServiceUnavailable {
					refused.Add(1)
				} else if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("%s", resp.Status)
				}
			}
			if err != nil {
				failed.Add(1)
			}
			lat[i] = time.Since(start)
		})
	}
	floodStart := time.Now()
	close(gate)
	wg.Wait()
	floodEnd := time.Now()
	rssAfter := vmRSS(cmd.Process.Pid)
	hwm := vmHWM(cmd.Process.Pid)
	slices.Sort(lat)
	fmt.Printf("journal: %d finished intents\n", n)
	fmt.Printf("%d scrapes at once: all answered or given up in %s; per scrape p50 %s, p99 %s, max %s; %d refused (503), %d failed (timeout %s or error)\n",
		scrapes, floodEnd.Sub(floodStart).Round(time.Millisecond), pct(lat, 50), pct(lat, 99), lat[len(lat)-1].Round(time.Millisecond),
		refused.Load(), failed.Load(), timeout)
	fmt.Printf("tether RSS: %s before the flood, %s after (peak %s)\n", rssBefore, rssAfter, hwm)

	time.Sleep(time.Second)
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		return err
	}
	// A tether still busy with scrapes its clients gave up on is not
	// waited for past a minute: the creates it answered are on record.
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			return fmt.Errorf("tether run: %w", err)
		}
	case <-time.After(time.Minute):
		fmt.Println("tether run had not exited a minute after the child was told to stop: killed")
		cmd.Process.Kill()
		<-exited
	}
	before, during, err := creates(out, floodStart, floodEnd)
	if err != nil {
		return err
	}
	fmt.Printf("proxy creates before the flood: %d, p50 %s, p99 %s, max %s\n", len(before), pct(before, 50), pct(before, 99), pct(before, 100))
	fmt.Printf("proxy creates during the flood: %d, p50 %s, p99 %s, max %s\n", len(during), pct(during, 50), pct(during, 99), pct(during, 100))
	return nil
}

// fillReleased journals n intents in a new journal, each released at once
// (finished, as history is).
func fillReleased(path string, n int) error {
	return fill.Journal(path, n, func(j *journal.Journal, _ int) error {
		in, _, err := j.Create(context.Background(), intent.Declaration{Labels: map[string]string{"bench": "scrapeload"}, Provider: "daytona"})
		if err == nil {
			_, err = j.Release(in.ID, intent.OutcomeDeleted)
		}
		return err
	})
}

// child is the runner: a create through DAYTONA_API_URL every 20 ms, each
// one's start (Unix ns) and latency (ns) written to out, until the stop
// file appears.
func child(out string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	defer w.Flush()
	api := os.Getenv("DAYTONA_API_URL")
	key := os.Getenv("DAYTONA_API_KEY")
	client := &http.Client{Timeout: 5 * time.Minute}
	for i := 0; ; i++ {
		if _, err := os.Stat(os.Getenv("SCRAPELOAD_STOP")); err == nil {
			return nil
		}
		req, err := http.NewRequest(http.MethodPost, strings.TrimSuffix(api, "/")+"/sandbox", bytes.NewReader([]byte(`{"name":"load-`+strconv.Itoa(i)+`"}`)))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("create: %s", resp.Status)
		}
		fmt.Fprintf(w, "%d %d\n", start.UnixNano(), time.Since(start).Nanoseconds())
		if err := w.Flush(); err != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// creates reads the child's record: latencies of the creates that started
// before the flood, and of those that overlapped it.
func creates(path string, from, to time.Time) (before, during []time.Duration, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	for line := range strings.Lines(string(b)) {
		var s, d int64
		if _, err := fmt.Sscan(line, &s, &d); err != nil {
			continue
		}
		start, lat := time.Unix(0, s), time.Duration(d)
		switch {
		case start.Add(lat).Before(from):
			before = append(before, lat)
		case start.Before(to):
			during = append(during, lat)
		}
	}
	slices.Sort(before)
	slices.Sort(during)
	return before, during, nil
}

func pct(d []time.Duration, p int) string {
	if len(d) == 0 {
		return "-"
	}
	i := (len(d)*p + 99) / 100
	if i > 0 {
		i--
	}
	return d[i].Round(10 * time.Microsecond).String()
}

func vmRSS(pid int) string { return status(pid, "VmRSS:") }
func vmHWM(pid int) string { return status(pid, "VmHWM:") }

// status reads one memory line of /proc/PID/status.
func status(pid int, field string) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "?"
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field {
			kb, _ := strconv.Atoi(f[1])
			return fmt.Sprintf("%.1f MiB", float64(kb)/1024)
		}
	}
	return "?"
}

func waitUp(url string) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s never answered", url)
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o600)
}
