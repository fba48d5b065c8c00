package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tether-run/tether/intentapi"
	"github.com/tether-run/tether/intentapi/client"
	"github.com/tether-run/tether/internal/config"
	"github.com/tether-run/tether/spool"
)

// Settings of `tether status`.
const (
	// DefaultStatusRecent is how many finished intents status shows after
	// the live ones.
	DefaultStatusRecent = 20
	// DefaultStatusTimeout bounds the whole status call over the socket.
	DefaultStatusTimeout = 10 * time.Second
	// statusErrorWidth truncates the last error in the table (--json has it whole).
	statusErrorWidth = 72
)

// finishedStates are the states an intent ends in.
var finishedStates = []spool.State{spool.Gone, spool.Stopped, spool.Released, spool.NeverCreated, spool.Foreign}

// StatusCommand is `tether status`: what a journal holds, read beside a
// running tether (through its socket) or from a journal left behind.
type StatusCommand struct{}

func (*StatusCommand) Synopsis() string {
	return "show the live and recently finished intents of a journal"
}

const statusUsage = `Usage: tether status [--journal PATH] [--socket PATH] [--json] [--recent N]

Shows the journal's owner id, every live intent (the unresolved ones: each
is a sandbox that may still exist), then the most recently declared
finished ones: state, name, sandbox id, age, attempts, last error.

Where it reads: a tether serving the journal is asked over its socket
(--socket or $TETHER_SOCKET, else the socket tether run listens on by
default); otherwise the journal file is opened read-only, which works on a
journal left by a dead container. It never writes to the journal.

Exit: 0, or 125 for a usage error or when neither a journal nor a socket
can be read.
`

// statusReport is what status prints; its JSON is the --json output.
type statusReport struct {
	Owner   string             `json:"owner"`
	Source  string             `json:"source"` // "socket" or "journal"
	Path    string             `json:"path"`   // the socket or the journal file
	Version string             `json:"version,omitempty"`
	Live    []intentapi.Intent `json:"live"`
	Recent  []intentapi.Intent `json:"recent"`
}

func (*StatusCommand) Run(ctx context.Context, args []string) error {
	cfg := config.Default()
	fs := newFlags("status", statusUsage)
	envErr := cfg.Bind(fs, config.Journal)
	socket := fs.String("socket", os.Getenv(config.EnvSocket), "socket of a running tether to ask ($"+config.EnvSocket+"; default: the socket tether run listens on, if one is there)")
	asJSON := fs.Bool("json", false, "print one JSON object instead of the table")
	recent := fs.Int("recent", DefaultStatusRecent, "finished intents to show after the live ones (0: none)")
	timeout := fs.Duration("timeout", DefaultStatusTimeout, "bound on the whole call")
	if err := parseConfig(fs, args, 0, &cfg, envErr); err != nil {
		return helped(err)
	}
	if *recent < 0 || *recent > spool.MaxPageLimit {
		return usageError(fs, fmt.Errorf("--recent %d: must be between 0 and %d", *recent, spool.MaxPageLimit))
	}
	journalGiven := isSet(fs, "journal") || os.Getenv(config.EnvJournal) != ""
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	rep, err := readStatus(ctx, cfg.Journal, journalGiven, *socket, *recent)
	if err != nil {
		return &ExitError{Code: ExitCodeUsage, Err: fmt.Errorf("status: %w", err)}
	}
	if *asJSON {
		b, _ := json.MarshalIndent(rep, "", "  ")
		fmt.Fprintln(stdout, string(b))
		return nil
	}
	rep.write(stdout, time.Now())
	return nil
}

func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// readStatus chooses where to read: the socket when one is given, else the
// journal read-only, else (the journal is held by a live tether, or there
// is none at the default path) the default socket.
func readStatus(ctx context.Context, journal string, journalGiven bool, socket string, recent int) (statusReport, error) {
	if socket != "" {
		return statusFromSocket(ctx, socket, recent)
	}
	j, err := spool.OpenReadOnly(journal, 0)
	if err == nil {
		defer j.Close()
		return statusFromJournal(j, recent)
	}
	held := errors.Is(err, spool.ErrLocked)
	missing := errors.Is(err, os.ErrNotExist)
	if !held && !(missing && !journalGiven) {
		return statusReport{}, err
	}
	found, tried := config.FindSocket()
	if found == "" {
		if held {
			return statusReport{}, fmt.Errorf("journal %s is held by a running tether, and no socket at %s: give its --socket", journal, strings.Join(tried, " or "))
		}
		return statusReport{}, fmt.Errorf("no journal at %s and no socket at %s (give --journal or --socket)", journal, strings.Join(tried, " or "))
	}
	return statusFromSocket(ctx, found, recent)
}

func statusFromJournal(j *spool.Journal, recent int) (statusReport, error) {
	rep := statusReport{Owner: j.Owner(), Source: "journal", Path: j.Path(), Live: []intentapi.Intent{}, Recent: []intentapi.Intent{}}
	q := spool.PageQuery{Limit: spool.MaxPageLimit}
	for {
		p, err := j.ListPage(q)
		if err != nil {
			return rep, err
		}
		for _, in := range p.Intents {
			rep.Live = append(rep.Live, intentapi.View(in))
		}
		if p.Next == "" {
			break
		}
		q.After = p.Next
	}
	if recent > 0 {
		p, err := j.ListPage(spool.PageQuery{States: finishedStates, Limit: recent, Reverse: true})
		if err != nil {
			return rep, err
		}
		for _, in := range p.Intents {
			rep.Recent = append(rep.Recent, intentapi.View(in))
		}
	}
	return rep, nil
}

func statusFromSocket(ctx context.Context, socket string, recent int) (statusReport, error) {
	c := client.New(socket)
	h, err := c.Health(ctx)
	if err != nil {
		return statusReport{}, err
	}
	rep := statusReport{Owner: h.Owner, Source: "socket", Path: socket, Version: h.Version, Live: []intentapi.Intent{}, Recent: []intentapi.Intent{}}
	q := intentapi.ListQuery{Limit: spool.MaxPageLimit}
	for {
		p, err := c.ListPage(ctx, q)
		if err != nil {
			return rep, err
		}
		rep.Live = append(rep.Live, p.Intents...)
		if p.NextCursor == "" {
			break
		}
		q.Cursor = p.NextCursor
	}
	if recent > 0 {
		p, err := c.ListPage(ctx, intentapi.ListQuery{States: finishedStates, Limit: recent, Newest: true})
		if err != nil {
			return rep, err
		}
		rep.Recent = p.Intents
	}
	return rep, nil
}

// write prints the table: the live intents first — those tether already
// failed on (attempts, last error) before the rest, oldest first — then the
// finished ones, most recently updated first.
func (rep statusReport) write(w io.Writer, now time.Time) {
	sort.SliceStable(rep.Live, func(a, b int) bool {
		fa, fb := rep.Live[a].LastError != "" || rep.Live[a].Attempts > 0, rep.Live[b].LastError != "" || rep.Live[b].Attempts > 0
		if fa != fb {
			return fa
		}
		return rep.Live[a].CreatedAt.Before(rep.Live[b].CreatedAt)
	})
	sort.SliceStable(rep.Recent, func(a, b int) bool { return rep.Recent[a].UpdatedAt.After(rep.Recent[b].UpdatedAt) })
	from := "journal " + rep.Path + " (read-only)"
	if rep.Source == "socket" {
		from = "tether " + rep.Version + " on " + rep.Path
	}
	fmt.Fprintf(w, "owner %s, from %s\n", rep.Owner, from)
	fmt.Fprintf(w, "%d live (unresolved: each may still be a running sandbox), %d recently finished shown\n", len(rep.Live), len(rep.Recent))
	if len(rep.Live)+len(rep.Recent) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STATE\tNAME\tSANDBOX\tAGE\tATTEMPTS\tPROVIDER\tLAST ERROR")
	for _, in := range append(append([]intentapi.Intent{}, rep.Live...), rep.Recent...) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", in.State, in.Name, orDash(in.SandboxID), age(now.Sub(in.CreatedAt)), in.Attempts, orDash(in.Provider), orDash(oneLine(in.LastError, statusErrorWidth)))
	}
	tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine keeps an error on one table row, cut to width runes.
func oneLine(s string, width int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > width {
		return string(r[:width-1]) + "…"
	}
	return s
}

// age is a duration as people read it in a table: 45s, 12m, 3h20m, 2d4h.
func age(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}
