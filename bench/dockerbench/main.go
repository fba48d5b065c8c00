// Command dockerbench measures what tether's Docker API proxy costs a
// runner, on this machine's engine, direct and through the proxy side by
// side in one run (alternating, so the machine's load falls on both):
//
//   - `docker run --rm IMAGE true`, the docker CLI's whole round trip;
//
//   - `docker exec C head -c 100M /dev/zero`: a hijacked stream's
//     throughput;
//
//   - one POST /containers/create (the journal's commit included) over the
//     API, the latency the proxy adds;
//
//   - removing 100 running containers: tether's drain against `docker rm
//     -fv` of the same kind of 100 (the docker CLI removes 50 at once:
//     docker/cli v28.2.2 cli/command/container/utils.go:136-166
//     parallelOperation).
//
//     go run ./bench/dockerbench -image IMAGE [-runs 20] [-tether PATH] [-engine SOCKET]
//
// IMAGE needs sh, head and sleep (a busybox image). Without -tether it
// builds tether. The proxy's journal goes to a temporary directory on
// $TMPDIR's file system.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	image := flag.String("image", "", "image with sh, head and sleep")
	runs := flag.Int("runs", 20, "runs of each CLI measurement, per side")
	creates := flag.Int("creates", 200, "API creates per side")
	tetherBin := flag.String("tether", "", "tether binary (default: go build ./cmd/tether)")
	drainOnly := flag.Bool("drain-only", false, "only the drain of 100 against parallel DELETEs")
	rounds := flag.Int("rounds", 3, "rounds of the drain measurement")
	flag.StringVar(&engine, "engine", engine, "the engine's Unix socket (a Podman service's, say)")
	flag.Parse()
	if *image == "" {
		fmt.Fprintln(os.Stderr, "dockerbench: -image is required")
		os.Exit(2)
	}
	if err := run(*image, *runs, *creates, *tetherBin, *drainOnly, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "dockerbench:", err)
		os.Exit(1)
	}
}

// engine is the engine's socket (-engine).
var engine = "/var/run/docker.sock"

type tether struct {
	cmd    *exec.Cmd
	sock   string
	stderr *bytes.Buffer
}

// startTether runs `tether run -- sh -c 'echo $DOCKER_HOST; exec sleep'`
// and returns it with its proxy's socket.
func startTether(bin, dir string) (*tether, error) {
	cmd := exec.Command(bin, "run", "--drain-timeout", "60s", "--", "sh", "-c", `echo "$DOCKER_HOST"; exec sleep 100000`)
	cmd.Env = append(os.Environ(), "TETHER_JOURNAL="+filepath.Join(dir, "j.db"), "TETHER_SOCKET="+filepath.Join(dir, "t.sock"),
		"TETHER_SPOOL="+filepath.Join(dir, "spool"), "TETHER_LOG_LEVEL=warn", "TETHER_DAYTONA_PROXY=false", "DOCKER_HOST=unix://"+engine)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	t := &tether{cmd: cmd, stderr: &bytes.Buffer{}}
	cmd.Stderr = t.stderr
	if f := os.Getenv("DOCKERBENCH_LOG"); f != "" {
		// tether's whole log, at debug level, appended to that file.
		log, err := os.OpenFile(f, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, err
		}
		cmd.Env = append(cmd.Env, "TETHER_LOG_LEVEL=debug")
		cmd.Stderr = io.MultiWriter(t.stderr, log)
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("tether: %v\n%s", err, t.stderr)
	}
	t.sock = strings.TrimPrefix(strings.TrimSpace(line), "unix://")
	return t, nil
}

// stop SIGTERMs tether and returns its drain's own time and count.
func (t *tether) stop() (time.Duration, int, error) {
	t.cmd.Process.Signal(syscall.SIGTERM)
	t.cmd.Wait()
	m := regexp.MustCompile(`drain: (\d+) intents in (\S+), (\d+) left live`).FindAllStringSubmatch(t.stderr.String(), -1)
	if len(m) == 0 {
		return 0, 0, fmt.Errorf("no drain report:\n%s", t.stderr)
	}
	last := m[len(m)-1]
	d, _ := time.ParseDuration(last[2])
	var n, left int
	fmt.Sscan(last[1], &n)
	fmt.Sscan(last[3], &left)
	if left != 0 {
		return d, n, fmt.Errorf("%d left live:\n%s", left, t.stderr)
	}
	return d, n, nil
}

func client(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
}

// timeCLI runs the docker CLI against DOCKER_HOST=host and returns its wall time.
func timeCLI(host string, args ...string) (time.Duration, error) {
	cmd := exec.Command("docker", args...)
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+host)
	cmd.Stdout = io.Discard
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	if err != nil {
		return 0, fmt.Errorf("docker %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return time.Since(start), nil
}

type stats []time.Duration

func (s stats) sorted() stats { c := slices.Clone(s); slices.Sort(c); return c }
func (s stats) median() time.Duration {
	c := s.sorted()
	return c[len(c)/2]
}
func (s stats) p99() time.Duration {
	c := s.sorted()
	return c[min(len(c)-1, len(c)*99/100)]
}
func (s stats) mean() time.Duration {
	var t time.Duration
	for _, d := range s {
		t += d
	}
	return t / time.Duration(len(s))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

func run(image string, runs, creates int, tetherBin string, drainOnly bool, rounds int) error {
	dir, err := os.MkdirTemp("", "dockerbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if tetherBin == "" {
		tetherBin = filepath.Join(dir, "tether")
		if out, err := exec.Command("go", "build", "-o", tetherBin, "./cmd/tether").CombinedOutput(); err != nil {
			return fmt.Errorf("go build: %v\n%s", err, out)
		}
	}
	if drainOnly {
		return removeMany(image, tetherBin, dir, rounds)
	}
	tt, err := startTether(tetherBin, dir)
	if err != nil {
		return err
	}
	direct, proxy := "unix://"+engine, "unix://"+tt.sock
	sides := []struct{ name, host string }{{"direct", direct}, {"proxy", proxy}}
	fmt.Printf("engine %s, proxy %s, image %s\n\n", engine, tt.sock, image)

	// 1. docker run --rm IMAGE true.
	runTimes := map[string]stats{}
	for i := 0; i < runs+2; i++ {
		for _, s := range sides {
			d, err := timeCLI(s.host, "run", "--rm", image, "true")
			if err != nil {
				return err
			}
			if i >= 2 { // warm-up
				runTimes[s.name] = append(runTimes[s.name], d)
			}
		}
	}
	fmt.Printf("| `docker run --rm %s true` (%d runs each) | median | mean | p99 |\n| --- | ---: | ---: | ---: |\n", image, runs)
	for _, s := range sides {
		st := runTimes[s.name]
		fmt.Printf("| %s | %s | %s | %s |\n", s.name, ms(st.median()), ms(st.mean()), ms(st.p99()))
	}
	fmt.Printf("ratio proxy/direct: median %.3f, mean %.3f\n\n",
		float64(runTimes["proxy"].median())/float64(runTimes["direct"].median()), float64(runTimes["proxy"].mean())/float64(runTimes["direct"].mean()))

	// 2. docker exec output of 100 MB.
	ctr := strings.TrimSpace(mustOut("docker", "run", "-d", "--label", "dockerbench=1", image, "sleep", "100000"))
	defer mustOut("docker", "rm", "-f", ctr)
	const size = 100 << 20
	execTimes := map[string]stats{}
	for i := 0; i < 6; i++ {
		for _, s := range sides {
			d, err := timeCLI(s.host, "exec", ctr, "head", "-c", fmt.Sprint(size), "/dev/zero")
			if err != nil {
				return err
			}
			if i >= 1 {
				execTimes[s.name] = append(execTimes[s.name], d)
			}
		}
	}
	fmt.Printf("| `docker exec C head -c 100M /dev/zero` (5 runs each) | median | MB/s at the median |\n| --- | ---: | ---: |\n")
	for _, s := range sides {
		st := execTimes[s.name]
		fmt.Printf("| %s | %s | %.0f |\n", s.name, ms(st.median()), float64(size)/(1<<20)/st.median().Seconds())
	}
	fmt.Printf("throughput proxy/direct at the median: %.3f\n\n", float64(execTimes["direct"].median())/float64(execTimes["proxy"].median()))

	// 3. One API create, one at a time.
	body := []byte(`{"Image":"` + image + `","Cmd":["true"],"Labels":{"dockerbench":"1"}}`)
	createTimes := map[string]stats{}
	var made []string
	var mu sync.Mutex
	clients := map[string]*http.Client{"direct": client(engine), "proxy": client(tt.sock)}
	for i := 0; i < creates+10; i++ {
		for _, s := range sides {
			start := time.Now()
			resp, err := clients[s.name].Post("http://docker/v1.41/containers/create", "application/json", bytes.NewReader(body))
			if err != nil {
				return err
			}
			var ans struct{ Id string }
			json.NewDecoder(resp.Body).Decode(&ans)
			resp.Body.Close()
			d := time.Since(start)
			if resp.StatusCode != http.StatusCreated {
				return fmt.Errorf("%s create: %d", s.name, resp.StatusCode)
			}
			if i >= 10 {
				createTimes[s.name] = append(createTimes[s.name], d)
			}
			mu.Lock()
			made = append(made, ans.Id)
			mu.Unlock()
		}
	}
	fmt.Printf("| `POST /containers/create` (%d each, one at a time) | p50 | p99 |\n| --- | ---: | ---: |\n", creates)
	for _, s := range sides {
		st := createTimes[s.name]
		fmt.Printf("| %s | %s | %s |\n", s.name, ms(st.median()), ms(st.p99()))
	}
	fmt.Printf("added by the proxy (journal commit included): p50 %s, p99 %s\n\n",
		ms(createTimes["proxy"].median()-createTimes["direct"].median()), ms(createTimes["proxy"].p99()-createTimes["direct"].p99()))
	// The created containers go, the proxy's by tether's drain at the end
	// of this run's first tether: remove them all now, through the proxy
	// (which marks its intents) and directly.
	parallelDelete(clients["proxy"], made, 16)
	if d, n, err := tt.stop(); err != nil {
		return err
	} else {
		fmt.Printf("(the first tether's drain confirmed %d intents in %s)\n\n", n, d)
	}

	return removeMany(image, tetherBin, dir, rounds)
}

// removeMany is the fourth measurement: removing 100 running containers,
// tether's drain against `docker rm -fv` of all 100 (the CLI's own 50 at
// once), alternating, rounds times.
func removeMany(image, tetherBin, dir string, rounds int) error {
	const n = 100
	fmt.Printf("| removing %d running containers | round | time | load (1 min) |\n| --- | ---: | ---: | ---: |\n", n)
	var drains, rms stats
	for round := 1; round <= rounds; round++ {
		ids, err := startMany(client(engine), image, n)
		if err != nil {
			return err
		}
		rm, err := timeCLI("unix://"+engine, append([]string{"rm", "-fv"}, ids...)...)
		if err != nil {
			return err
		}
		rms = append(rms, rm)
		fmt.Printf("| `docker rm -fv` of the 100 (50 at once) | %d | %s | %s |\n", round, ms(rm), loadavg())

		tdir := filepath.Join(dir, fmt.Sprint("drain", round))
		os.MkdirAll(tdir, 0o700)
		t2, err := startTether(tetherBin, tdir)
		if err != nil {
			return err
		}
		if _, err := startMany(client(t2.sock), image, n); err != nil {
			return err
		}
		d, count, err := t2.stop()
		if err != nil {
			return err
		}
		if count != n {
			return fmt.Errorf("the drain had %d intents, want %d", count, n)
		}
		drains = append(drains, d)
		fmt.Printf("| tether's drain (its report) | %d | %s | %s |\n", round, ms(d), loadavg())
	}
	fmt.Printf("drain / docker rm -fv: median %.2f (%s / %s), each round's ratio:", float64(drains.median())/float64(rms.median()), ms(drains.median()), ms(rms.median()))
	for i := range drains {
		fmt.Printf(" %.2f", float64(drains[i])/float64(rms[i]))
	}
	fmt.Println()
	return nil
}

// startMany creates and starts n containers running sleep, 8 at once.
func startMany(c *http.Client, image string, n int) ([]string, error) {
	body := []byte(`{"Image":"` + image + `","Cmd":["sleep","100000"],"Labels":{"dockerbench":"1"}}`)
	ids := make([]string, n)
	errs := make(chan error, n)
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			resp, err := c.Post("http://docker/v1.41/containers/create", "application/json", bytes.NewReader(body))
			if err != nil {
				errs <- err
				return
			}
			var ans struct{ Id string }
			json.NewDecoder(resp.Body).Decode(&ans)
			resp.Body.Close()
			resp, err = c.Post("http://docker/v1.41/containers/"+ans.Id+"/start", "", nil)
			if err != nil {
				errs <- err
				return
			}
			resp.Body.Close()
			ids[i] = ans.Id
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return nil, err
	}
	return ids, nil
}

// parallelDelete force-removes ids, k at once.
func parallelDelete(c *http.Client, ids []string, k int) {
	sem := make(chan struct{}, k)
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			req, _ := http.NewRequest(http.MethodDelete, "http://docker/v1.41/containers/"+id+"?force=1&v=1", nil)
			if resp, err := c.Do(req); err == nil {
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
}

// loadavg is the machine's 1-minute load average.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

func mustOut(name string, args ...string) string {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "DOCKER_HOST=unix://"+engine)
	out, err := cmd.Output()
	if err != nil {
		fmt.Fprintf(os.Stderr, "dockerbench: %s %s: %v\n", name, strings.Join(args, " "), err)
		os.Exit(1)
	}
	return string(out)
}
