package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/config"
	"github.com/tether-run/tether/internal/metrics"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/internal/sidecar"
	"github.com/tether-run/tether/provider"
)

// sweepCommand is `tether sweep`: the fleet-level backstop for sandboxes
// whose journal is gone with its container and volume.
type sweepCommand struct{}

func (*sweepCommand) Synopsis() string {
	return "find and delete stale tether sandboxes in the Daytona account (dry run unless --yes)"
}

var sweepUsage = `Usage: tether sweep [--yes] [--owner ID] [--label k=v]... [--older-than D] [--idle-for D] [flags]

Lists every sandbox of the Daytona account, or with --provider e2b the E2B
team, or with --provider docker the Docker engine's containers, networks and
volumes (credentials and engine from the environment, as for tether run),
that carries a tether-owner label, and
marks as stale those created more than --older-than ago AND idle for more
than --idle-for (Daytona's last activity; E2B reports none, so there only a
paused sandbox, idle since it was paused, can be stale; Docker: a running
container is active now, a stopped one since it exited, a network or volume
in use now). A sandbox labelled tether-keep
(true, 1 or yes, in any case) is never stale: tether labels so what it
stops on purpose or hands back as kept; one without tether-owner is never
touched. tether cannot label an E2B sandbox or a Docker container after
its create (E2B's metadata and Docker's labels are fixed then), so on E2B
and Docker nothing is stale unless --include-unmarkable says to
delete the stale ones all the same, those handed back as kept among them:
scope it with --owner to a journal that is lost.

Without --yes it is a dry run: it prints what it would delete and why, and
changes nothing. A URL nothing answers at (connection refused, a host that
does not resolve) ends the sweep at once. With --yes it deletes each stale sandbox after reading it
again (still the same sandbox, still tether's, still stale), and waits until
the provider confirms it gone (404). Rate limits are honoured (Retry-After).

With --metrics-push URL (a Prometheus Pushgateway's job URL, e.g.
http://pushgateway:9091/metrics/job/tether_sweep) it pushes what it found,
for the alerts that watch the tethers (docs/operations.md).

Exit: 0 when every stale sandbox was deleted (or, in a dry run, listed),
` + fmt.Sprint(exitCodeUnresolved) + ` when some were not confirmed deleted, ` + fmt.Sprint(exitCodeUsage) + ` for a usage error, missing
credentials, or an account that could not be listed.
`

func (*sweepCommand) Run(ctx context.Context, args []string) error {
	cfg := config.Default()
	fs := newFlags("sweep", sweepUsage)
	envErr := cfg.Bind(fs, config.Sweep, config.Log)
	yes := fs.Bool("yes", false, "delete the stale sandboxes (without it: a dry run that changes nothing)")
	asJSON := fs.Bool("json", false, "print the report as one JSON object instead of the table")
	unmarkable := fs.Bool("include-unmarkable", false, "also delete stale sandboxes of a provider tether cannot label kept (E2B, Docker), the ones it handed back as kept among them")
	opened := sidecar.OpenProviders(cfg, slog.New(slog.DiscardHandler))
	provName := fs.String("provider", intent.DefaultProvider, "the provider whose account is swept: "+strings.Join(opened.Names(), ", "))
	if err := parseConfig(fs, args, 0, &cfg, envErr); err != nil {
		return helped(err)
	}
	log := newLogger(cfg, os.Stderr)
	prov, err := sidecar.OpenProviders(cfg, log).Provider(*provName)
	if err != nil {
		return &exitError{Code: exitCodeUsage, Err: fmt.Errorf("sweep: %w", err)}
	}
	r := &reaper.Reaper{Providers: provider.NewSet(prov), Logger: log, Concurrency: cfg.SweepConcurrency, RestoreWindow: cfg.E2BRestoreWindow}
	rule := reaper.SweepRule{Provider: prov.Name(), Owner: cfg.SweepOwner, Labels: cfg.Labels, OlderThan: cfg.SweepOlderThan, IdleFor: cfg.SweepIdleFor, Unmarkable: *unmarkable}
	ctx, cancel := context.WithTimeout(ctx, cfg.SweepTimeout)
	defer cancel()
	log.Info("sweep: listing the account", "deadline", time.Now().Add(cfg.SweepTimeout).Format(time.TimeOnly), "dry_run", !*yes)
	rep, err := r.Sweep(ctx, rule, *yes)
	if cfg.SweepPush != "" {
		// Pushed even when the sweep failed: a sweep that could not list
		// the account says so (complete 0) to the alerts.
		o := metrics.SweepOutcome{Provider: prov.Name(), Report: rep, Complete: err == nil, At: time.Now()}
		if perr := metrics.PushSweep(context.WithoutCancel(ctx), http.DefaultClient, cfg.SweepPush, o); perr != nil {
			log.Error("sweep: the metrics push failed", "err", perr)
		} else {
			log.Info("sweep: metrics pushed")
		}
	}
	if err != nil && !errors.Is(err, reaper.ErrSweepIncomplete) {
		return &exitError{Code: exitCodeUsage, Err: err}
	}
	if *asJSON {
		b, _ := json.MarshalIndent(rep, "", "  ")
		fmt.Fprintln(stdout, string(b))
	} else {
		writeSweep(stdout, rep, rule, time.Now())
	}
	if err != nil {
		return &exitError{Code: exitCodeUnresolved, Err: err}
	}
	return nil
}

func writeSweep(w io.Writer, rep reaper.SweepReport, rule reaper.SweepRule, now time.Time) {
	owner := rule.Owner
	if owner == "" {
		owner = "any"
	}
	scope := config.FormatLabels(rule.Labels)
	if scope == "" {
		scope = "none"
	}
	fmt.Fprintf(w, "sweep: %s listed in %s (owner %s, scope labels %s); %d with tether-owner in scope; %d without tether-owner and %d of other owners left untouched\n",
		count(rep.Listed, "sandbox", "sandboxes"), count(rep.Pages, "page", "pages"), owner, scope, len(rep.Items), rep.NotOurs, rep.OtherOwner)
	fmt.Fprintf(w, "stale: created more than %s ago and idle for more than %s\n", rule.OlderThan, rule.IdleFor)
	if rep.DryRun {
		fmt.Fprintf(w, "DRY RUN: nothing was deleted; run with --yes to delete the %d marked delete\n", rep.Count(reaper.SweepDelete))
	} else {
		fmt.Fprintf(w, "deleted and confirmed gone: %d; failed: %d\n", rep.Count(reaper.SweepDeleted), rep.Count(reaper.SweepFailed))
	}
	if len(rep.Items) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ACTION\tSANDBOX\tNAME\tOWNER\tSTATE\tAGE\tIDLE\tWHY")
	for _, it := range rep.Items {
		idle := "-"
		if !it.LastActivityAt.IsZero() {
			idle = age(now.Sub(it.LastActivityAt))
		}
		created := "-"
		if !it.CreatedAt.IsZero() {
			created = age(now.Sub(it.CreatedAt))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", it.Action, it.ID, it.Name, it.Owner, it.State, created, idle, oneLine(it.Reason, 120))
	}
	tw.Flush()
}
