package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/intentapi"
	"github.com/tether-run/tether/intentapi/client"
	"github.com/tether-run/tether/internal/config"
	"github.com/tether-run/tether/internal/intake/spooldir"
)

// defaultIntentTimeout bounds one `tether intent` call. It exceeds the
// server's own bound on a DELETE (socket.DefaultDeleteTimeout) so the client
// sees tether's 504 rather than its own timeout.
const defaultIntentTimeout = 60 * time.Second

// exitCodeRefused is the exit code of `tether intent` when tether answered
// with an error (4xx or 5xx); the error is printed.
const exitCodeRefused = 1

// intentCommand is `tether intent new|observe|release|delete|ls|get`: the
// client of the intent API for shell runners. It speaks $TETHER_SOCKET; with
// only $TETHER_SPOOL set it writes spool files instead (new, observe,
// release, delete), which tether takes when it is up.
type intentCommand struct{}

func (*intentCommand) Synopsis() string {
	return "declare, observe, release, delete or list sandbox intents"
}

const intentUsage = `Usage:
  tether intent new [--label k=v]... [--on-drain delete|stop] [--key K] [--provider daytona|e2b|docker]
  tether intent observe ID SANDBOX_ID
  tether intent release ID [--outcome deleted|kept]
  tether intent delete ID
  tether intent ls
  tether intent get ID

Speaks the socket at $TETHER_SOCKET (or --socket). When only $TETHER_SPOOL
(or --spool) is set, new/observe/release/delete write spool files instead.
With neither (docker exec, an operator's shell), it speaks the socket tether
run listens on by default (/run/tether/tether.sock in a container).

"new --key K" makes K the intent's id on either path: K is the handle of
observe, release, delete and get, and the sandbox's name is tether-K. Without
--key the socket picks a ULID (the spool writer picks one itself). Through
the spool, "new" prints the intent as tether will journal it — the name and
labels (the scope labels of $TETHER_LABELS and the owner of $TETHER_OWNER
included) to create the sandbox with.

Output: one intent as JSON per line. Exit: 0 ok, 1 refused by tether (the
error is printed), 125 usage or tether unreachable.
`

// intentArgs is what one `tether intent` call carries.
type intentArgs struct {
	pos      []string
	labels   map[string]string
	onDrain  string
	key      string
	outcome  string
	provider string
}

// intentSub is one subcommand of `tether intent`: its arguments and flags,
// what it checks before anything is sent, and what it does over the socket
// and (if it can) through the spool directory.
type intentSub struct {
	args     []string // names of the positional arguments
	flags    func(fs *flag.FlagSet, a *intentArgs)
	validate func(a *intentArgs) error
	socket   func(ctx context.Context, cl *client.Client, a *intentArgs) error
	spool    func(dir string, a *intentArgs) error // nil: needs the socket
}

var intentSubs = map[string]intentSub{
	"new": {
		flags: func(fs *flag.FlagSet, a *intentArgs) {
			fs.Var(config.LabelFlag(a.labels), "label", "label k=v for the sandbox; repeatable")
			fs.StringVar(&a.onDrain, "on-drain", string(intent.DrainDelete), "what the drain does with the sandbox: delete or stop")
			fs.StringVar(&a.key, "key", "", "the intent's id and handle (observe KEY, release KEY), so its sandbox name is tether-KEY: the same key again returns the same live intent; once it has ended the key is refused")
			fs.StringVar(&a.provider, "provider", "", "the provider of the sandbox: daytona (the default), e2b or docker")
		},
		validate: func(a *intentArgs) error {
			err := errors.Join(intent.ValidateLabels(a.labels), intent.ValidateOnDrain(intent.OnDrain(a.onDrain)))
			if a.key != "" {
				if kerr := intent.ValidateIntentID(a.key); kerr != nil {
					err = errors.Join(err, fmt.Errorf("--key: the key is the intent id, and so the sandbox name: %w", kerr))
				}
			}
			return err
		},
		socket: func(ctx context.Context, cl *client.Client, a *intentArgs) error {
			// The key is the intent id on both paths, as the spool needs
			// it to be (spoolNew): the handle the runner passes to
			// observe and release, and the name tether-KEY, whichever
			// path this call takes.
			return printed(cl.CreateIntent(ctx, intentapi.CreateRequest{Labels: a.labels, OnDrain: intent.OnDrain(a.onDrain), ID: a.key, Provider: a.provider}))
		},
		spool: spoolNew,
	},
	"observe": {
		args:     []string{"ID", "SANDBOX_ID"},
		validate: func(a *intentArgs) error { return intent.ValidateSandboxID(a.pos[1]) },
		socket: func(ctx context.Context, cl *client.Client, a *intentArgs) error {
			return printed(cl.Observe(ctx, a.pos[0], a.pos[1]))
		},
		spool: func(dir string, a *intentArgs) error {
			return writeSpool(dir, spooldir.FileOp{Op: spooldir.OpObserve, ID: a.pos[0], SandboxID: a.pos[1]})
		},
	},
	"release": {
		args: []string{"ID"},
		flags: func(fs *flag.FlagSet, a *intentArgs) {
			fs.StringVar(&a.outcome, "outcome", intent.OutcomeDeleted, "what the runner did: deleted or kept")
		},
		validate: func(a *intentArgs) error { return intent.ValidateOutcome(a.outcome) },
		socket: func(ctx context.Context, cl *client.Client, a *intentArgs) error {
			return printed(cl.Release(ctx, a.pos[0], a.outcome))
		},
		spool: func(dir string, a *intentArgs) error {
			return writeSpool(dir, spooldir.FileOp{Op: spooldir.OpRelease, ID: a.pos[0], Outcome: a.outcome})
		},
	},
	"delete": {
		args: []string{"ID"},
		socket: func(ctx context.Context, cl *client.Client, a *intentArgs) error {
			return printed(cl.Delete(ctx, a.pos[0]))
		},
		spool: func(dir string, a *intentArgs) error {
			return writeSpool(dir, spooldir.FileOp{Op: spooldir.OpDelete, ID: a.pos[0]})
		},
	},
	"get": {
		args: []string{"ID"},
		socket: func(ctx context.Context, cl *client.Client, a *intentArgs) error {
			return printed(cl.Get(ctx, a.pos[0]))
		},
	},
	"ls": {
		socket: func(ctx context.Context, cl *client.Client, a *intentArgs) error {
			// Page by page, so a journal of many live intents is never
			// held in memory at once, on either side.
			q := intentapi.ListQuery{Limit: intent.MaxPageLimit}
			for {
				p, err := cl.ListPage(ctx, q)
				if err != nil {
					return refusedOrFailed(err)
				}
				for _, in := range p.Intents {
					printJSON(in)
				}
				if p.NextCursor == "" {
					return nil
				}
				q.Cursor = p.NextCursor
			}
		},
	},
}

func (c *intentCommand) Run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return &exitError{Code: exitCodeUsage, Err: errors.New("intent: which subcommand? new, observe, release, delete, ls or get (see tether intent -h)")}
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, intentUsage)
		return nil
	}
	name, args := args[0], args[1:]
	sub, ok := intentSubs[name]
	if !ok {
		return &exitError{Code: exitCodeUsage, Err: fmt.Errorf("intent: unknown subcommand %q (see tether intent -h)", name)}
	}
	fs := newFlags("intent "+name, intentUsage)
	socket := fs.String("socket", os.Getenv(config.EnvSocket), "intent API socket ($"+config.EnvSocket+")")
	spoolDir := fs.String("spool", os.Getenv(config.EnvSpool), "spool directory, used when no socket is set ($"+config.EnvSpool+")")
	timeout := fs.Duration("timeout", defaultIntentTimeout, "bound on the whole call")
	a := &intentArgs{labels: map[string]string{}}
	if sub.flags != nil {
		sub.flags(fs, a)
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return helped(err)
	}
	if len(pos) != len(sub.args) {
		return usageError(fs, fmt.Errorf("takes %d argument(s) %s, got %d", len(sub.args), strings.Join(sub.args, " "), len(pos)))
	}
	a.pos = pos
	// Check what the request carries here, so a typo is a usage error and
	// the spool never gets a file tether would reject.
	for _, id := range pos[:min(len(pos), 1)] {
		if err := intent.ValidateIntentID(id); err != nil {
			return usageError(fs, err)
		}
	}
	if sub.validate != nil {
		if err := sub.validate(a); err != nil {
			return usageError(fs, err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	if *socket == "" && *spoolDir == "" {
		// Outside tether's child (docker exec, an operator's shell): the
		// socket tether run listens on by default.
		found, tried := config.FindSocket()
		if found == "" {
			return usageError(fs, fmt.Errorf("neither $%s nor $%s is set, and no socket at %s (is tether run up?)", config.EnvSocket, config.EnvSpool, strings.Join(tried, " or ")))
		}
		*socket = found
	}
	switch {
	case *socket != "":
		return sub.socket(ctx, client.New(*socket), a)
	case sub.spool == nil:
		return usageError(fs, fmt.Errorf("%s needs the socket ($%s); only the spool is set", name, config.EnvSocket))
	default:
		return sub.spool(*spoolDir, a)
	}
}

// spoolNew declares an intent through the spool: the id is chosen here, so
// the name and labels tether will verify are known now, and printed.
func spoolNew(dir string, a *intentArgs) error {
	owner := os.Getenv(config.EnvOwner)
	if owner == "" {
		return &exitError{Code: exitCodeUsage, Err: fmt.Errorf("intent new: without a socket, $%s must be set (tether run gives it to the child): the sandbox must carry the owner label", config.EnvOwner)}
	}
	scope, err := config.ParseLabels(os.Getenv(config.EnvLabels))
	if os.Getenv(config.EnvLabels) == "" {
		scope, err = nil, nil
	}
	if err != nil {
		return &exitError{Code: exitCodeUsage, Err: fmt.Errorf("intent new: $%s: %w", config.EnvLabels, err)}
	}
	id := a.key
	if id == "" {
		id = strings.ToLower(ulid.Make().String())
	}
	if err := intent.ValidateIntentID(id); err != nil {
		return &exitError{Code: exitCodeUsage, Err: fmt.Errorf("intent new: --key: without a socket the key is the intent id, and so the sandbox name: %w", err)}
	}
	f := spooldir.FileOp{Op: spooldir.OpIntent, ID: id, Labels: a.labels, OnDrain: intent.OnDrain(a.onDrain), Provider: a.provider}
	if err := writeSpool(dir, f); err != nil {
		return err
	}
	n := intent.Declaration{ID: id, Labels: intent.MergeLabels(scope, a.labels), OnDrain: f.OnDrain, Provider: f.Provider}
	printJSON(intentapi.View(intent.Plan(owner, n, time.Now().UTC())))
	return nil
}

func writeSpool(dir string, f spooldir.FileOp) error {
	if _, err := spooldir.Write(dir, f); err != nil {
		return fmt.Errorf("intent: spool %s: %w", dir, err)
	}
	return nil
}

func printed(in intentapi.Intent, err error) error {
	if err != nil {
		var e *client.Error
		if errors.As(err, &e) && e.Intent != nil {
			printJSON(*e.Intent)
		}
		return refusedOrFailed(err)
	}
	printJSON(in)
	return nil
}

func printJSON(v any) {
	b, _ := json.Marshal(v)
	fmt.Fprintln(stdout, string(b))
}

// refusedOrFailed: tether's answer of 4xx/5xx exits 1, not reaching tether 125.
func refusedOrFailed(err error) error {
	var e *client.Error
	if errors.As(err, &e) {
		return &exitError{Code: exitCodeRefused, Err: fmt.Errorf("intent: %w", err)}
	}
	return fmt.Errorf("intent: %w", err)
}

// parseInterspersed parses flags wherever they stand among the arguments
// (`release ID --outcome kept`), as shell users write them.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var after []string // everything after "--" is an argument, even "-x"
	for i, a := range args {
		if a == "--" {
			args, after = args[:i], args[i+1:]
			break
		}
	}
	var pos []string
	for {
		if err := parseFlags(fs, args, -1); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return append(pos, after...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
