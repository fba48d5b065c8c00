package metrics

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/tether-run/tether/internal/reaper"
)

// A sweep is a job that runs and exits, too short for a scrape to find it,
// so it pushes what it found to a Prometheus Pushgateway instead
// (`tether sweep --metrics-push`), which keeps the last push for every
// scrape after it: the same Prometheus and the same alerts see it
// (examples/prometheus/alerts.yml, group tether-sweep). Pushed, not
// written for node_exporter's textfile collector: a Kubernetes CronJob
// under the "restricted" Pod Security Standard may not mount the node's
// textfile directory (hostPath is refused), and a push needs nothing of
// the node.

// SweepOutcome is what one sweep found and did.
type SweepOutcome struct {
	Provider string
	Report   reaper.SweepReport
	// Complete: the account was listed and every stale sandbox deleted
	// and confirmed gone (in a dry run: listed).
	Complete bool
	At       time.Time // when the sweep ended
}

// sweepHelp is each pushed family's HELP text, in the order written.
var sweepHelp = []struct{ name, typ, help string }{
	{"tether_sweep_last_run_timestamp_seconds", "gauge", "When the last sweep ended (Unix time)."},
	{"tether_sweep_duration_seconds", "gauge", "How long the last sweep took."},
	{"tether_sweep_listed_sandboxes", "gauge", "Sandboxes the provider listed in the last sweep, tether's or not."},
	{"tether_sweep_stale_sandboxes", "gauge", "Stale tether sandboxes the last sweep found (old, idle, in no kept journal): each was left running."},
	{"tether_sweep_deleted_sandboxes", "gauge", "Stale sandboxes the last sweep deleted and confirmed gone."},
	{"tether_sweep_failed_sandboxes", "gauge", "Stale sandboxes the last sweep could not confirm deleted: still running."},
	{"tether_sweep_dry_run", "gauge", "1 when the last sweep ran without --yes (it deleted nothing)."},
	{"tether_sweep_complete", "gauge", "1 when the last sweep listed the account and deleted every stale sandbox it found (a dry run: listed it)."},
}

// WriteSweep writes o in the Prometheus text format, with no provider
// label: PushSweep puts it in the grouping key, as the Pushgateway wants
// (a pushed series may not carry a grouping label of its own).
func WriteSweep(w io.Writer, o SweepOutcome) error {
	rep := o.Report
	stale := rep.Count(reaper.SweepDelete) + rep.Count(reaper.SweepDeleted) + rep.Count(reaper.SweepFailed)
	values := map[string]float64{
		"tether_sweep_last_run_timestamp_seconds": float64(o.At.UnixMilli()) / 1000,
		"tether_sweep_duration_seconds":           rep.Elapsed.Seconds(),
		"tether_sweep_listed_sandboxes":           float64(rep.Listed),
		"tether_sweep_stale_sandboxes":            float64(stale),
		"tether_sweep_deleted_sandboxes":          float64(rep.Count(reaper.SweepDeleted)),
		"tether_sweep_failed_sandboxes":           float64(rep.Count(reaper.SweepFailed)),
		"tether_sweep_dry_run":                    b2f(rep.DryRun),
		"tether_sweep_complete":                   b2f(o.Complete),
	}
	var b bytes.Buffer
	for _, f := range sweepHelp {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n%s %g\n", f.name, f.help, f.name, f.typ, f.name, values[f.name])
	}
	_, err := w.Write(b.Bytes())
	return err
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// PushTimeout bounds a push: a sweep's exit does not wait on a Pushgateway
// that does not answer.
const PushTimeout = 10 * time.Second

// PushSweep PUTs o to the Pushgateway job URL u
// (http://pushgateway:9091/metrics/job/tether_sweep), in the group of
// its provider: u + "/provider/<provider>". A PUT replaces what the last
// push of that group said, so a series of the last sweep never outlives
// the next one.
func PushSweep(ctx context.Context, client *http.Client, u string, o SweepOutcome) error {
	target, err := sweepGroupURL(u, o.Provider)
	if err != nil {
		return err
	}
	var body bytes.Buffer
	if err := WriteSweep(&body, o); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, PushTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, target, &body)
	if err != nil {
		return fmt.Errorf("push the sweep's metrics: %w", err)
	}
	req.Header.Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("push the sweep's metrics to %s: %w", redactURL(target), err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("push the sweep's metrics to %s: HTTP %d: %s", redactURL(target), resp.StatusCode, strings.TrimSpace(string(msg)))
	}
	return nil
}

// sweepGroupURL checks u and adds the provider's grouping label.
func sweepGroupURL(u, provider string) (string, error) {
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
		return "", fmt.Errorf("--metrics-push %q: want the Pushgateway's job URL, e.g. http://pushgateway:9091/metrics/job/tether_sweep", u)
	}
	if !strings.Contains(p.Path, "/metrics/job/") {
		return "", errors.New("--metrics-push " + redactURL(u) + ": the path must name the job (…/metrics/job/<job>), e.g. http://pushgateway:9091/metrics/job/tether_sweep")
	}
	p.Path = strings.TrimRight(p.Path, "/") + "/provider/" + url.PathEscape(provider)
	p.RawPath = ""
	return p.String(), nil
}

// redactURL drops a password from u (basic auth in a push URL).
func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(an unreadable URL)"
	}
	return p.Redacted()
}
