package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/tether-run/tether/internal/api"
	"github.com/tether-run/tether/internal/config"
	"github.com/tether-run/tether/spool"
)

// DefaultIntentTimeout bounds one `tether intent` call. It exceeds the
// server's own bound on a DELETE (api.DefaultDeleteTimeout) so the client
// sees tether's 504 rather than its own timeout.
const DefaultIntentTimeout = 60 * time.Second

// ExitCodeRefused is the exit code of `tether intent` when tether answered
// with an error (4xx or 5xx); the error is printed.
const ExitCodeRefused = 1

// IntentCommand is `tether intent new|observe|release|delete|ls|get`: the
// client of the intent API for shell runners. It speaks $TETHER_SOCKET; with
// only $TETHER_SPOOL set it writes spool files instead (new, observe,
// release, delete), which tether takes when it is up.
type IntentCommand struct{}

func (*IntentCommand) Synopsis() string {
	return "declare, observe, release, delete or list sandbox intents"
}

const intentUsage = `Usage:
  tether intent new [--label k=v]... [--on-drain delete|stop] [--key K]
  tether intent observe ID SANDBOX_ID
  tether intent release ID [--outcome deleted|kept]
  tether intent delete ID
  tether intent ls
  tether intent get ID

Speaks the socket at $TETHER_SOCKET (or --socket). When only $TETHER_SPOOL
(or --spool) is set, new/observe/release/delete write spool files instead.
With neither (docker exec, an operator's shell), it speaks the socket tether
run listens on by default (/run/tether/tether.sock in a container);
"new" then chooses the intent id itself (a ULID, or --key if given) and
prints the intent as it will be journaled once tether takes the file.

Output: one intent as JSON per line. Exit: 0 ok, 1 refused by tether (the
error is printed), 125 usage or tether unreachable.
`

func (c *IntentCommand) Run(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(os.Stderr, intentUsage)
		if len(args) == 0 {
			return &ExitError{Code: ExitCodeUsage}
		}
		return nil
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("tether intent "+sub, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	socket := fs.String("socket", os.Getenv(config.EnvSocket), "intent API socket ($"+config.EnvSocket+")")
	spoolDir := fs.String("spool", os.Getenv(config.EnvSpool), "spool directory, used when no socket is set ($"+config.EnvSpool+")")
	timeout := fs.Duration("timeout", DefaultIntentTimeout, "bound on the whole call")
	labels := map[string]string{}
	var onDrain, key, outcome string
	var nargs int
	switch sub {
	case "new":
		fs.Func("label", "label k=v for the sandbox; repeatable", func(s string) error {
			k, v, ok := strings.Cut(s, "=")
			if !ok {
				return fmt.Errorf("want k=v, got %q", s)
			}
			labels[k] = v
			return nil
		})
		fs.StringVar(&onDrain, "on-drain", "delete", "what the drain does with the sandbox: delete or stop")
		fs.StringVar(&key, "key", "", "idempotency key: the same key again returns the same intent")
	case "observe":
		nargs = 2
	case "release":
		nargs = 1
		fs.StringVar(&outcome, "outcome", spool.OutcomeDeleted, "what the runner did: deleted or kept")
	case "delete", "get":
		nargs = 1
	case "ls":
	default:
		return intentUsageError(fmt.Errorf("unknown subcommand %q", sub))
	}
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(os.Stderr, intentUsage)
		return nil
	}
	if err != nil {
		return intentUsageError(err)
	}
	if len(pos) != nargs {
		return intentUsageError(fmt.Errorf("%s takes %d argument(s), got %d", sub, nargs, len(pos)))
	}
	// Check what the request carries here, so a typo is a usage error and
	// the spool never gets a file tether would reject.
	var verr error
	switch sub {
	case "new":
		verr = errors.Join(spool.ValidateLabels(labels), spool.ValidateOnDrain(spool.OnDrain(onDrain)))
		if key != "" {
			verr = errors.Join(verr, spool.ValidateKey(key))
		}
	case "observe":
		verr = spool.ValidateSandboxID(pos[1])
	case "release":
		verr = spool.ValidateOutcome(outcome)
	}
	if verr != nil {
		return intentUsageError(verr)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	if *socket == "" && *spoolDir != "" {
		return c.spool(*spoolDir, sub, pos, labels, spool.OnDrain(onDrain), key, outcome)
	}
	if *socket == "" {
		// Outside tether's child (docker exec, an operator's shell): the
		// socket tether run listens on by default.
		found, tried := config.FindSocket()
		if found == "" {
			return intentUsageError(fmt.Errorf("neither $%s nor $%s is set, and no socket at %s (is tether run up?)", config.EnvSocket, config.EnvSpool, strings.Join(tried, " or ")))
		}
		*socket = found
	}

	cl := api.NewClient(*socket)
	switch sub {
	case "new":
		return printed(cl.CreateIntent(ctx, api.CreateRequest{Labels: labels, OnDrain: spool.OnDrain(onDrain), Key: key}))
	case "observe":
		return printed(cl.Observe(ctx, pos[0], pos[1]))
	case "release":
		return printed(cl.Release(ctx, pos[0], outcome))
	case "delete":
		return printed(cl.Delete(ctx, pos[0]))
	case "get":
		return printed(cl.Get(ctx, pos[0]))
	default: // ls
		list, err := cl.List(ctx)
		if err != nil {
			return refusedOrFailed(err)
		}
		for _, in := range list {
			printJSON(in)
		}
		return nil
	}
}

func printed(in spool.Intent, err error) error {
	if err != nil {
		var e *api.Error
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
	fmt.Println(string(b))
}

// refusedOrFailed: tether's answer of 4xx/5xx exits 1, not reaching tether 125.
func refusedOrFailed(err error) error {
	var e *api.Error
	if errors.As(err, &e) {
		return &ExitError{Code: ExitCodeRefused, Err: fmt.Errorf("intent: %w", err)}
	}
	return fmt.Errorf("intent: %w", err)
}

func intentUsageError(err error) error {
	return &ExitError{Code: ExitCodeUsage, Err: fmt.Errorf("intent: %w (see tether intent -h)", err)}
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
		if err := fs.Parse(args); err != nil {
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

// spool writes one spool file for sub. Names start with the wall clock in
// nanoseconds so that the files of one runner, written one after another,
// sort (and are taken) in the order they were written.
func (c *IntentCommand) spool(dir, sub string, pos []string, labels map[string]string, onDrain spool.OnDrain, key, outcome string) error {
	var f spool.FileOp
	var out *spool.Intent
	switch sub {
	case "new":
		id := key
		if id == "" {
			id = strings.ToLower(ulid.Make().String())
		}
		if err := spool.ValidateClientID(id); err != nil {
			return intentUsageError(fmt.Errorf("--key: without a socket the key is the spool client id: %w", err))
		}
		f = spool.FileOp{Op: spool.OpIntent, ID: id, Labels: labels, OnDrain: onDrain}
		out = spoolIntent(id, labels, onDrain)
	case "observe":
		f = spool.FileOp{Op: spool.OpObserve, ID: pos[0], SandboxID: pos[1]}
	case "release":
		f = spool.FileOp{Op: spool.OpRelease, ID: pos[0], Outcome: outcome}
	case "delete":
		f = spool.FileOp{Op: spool.OpDelete, ID: pos[0]}
	default:
		return intentUsageError(fmt.Errorf("%s needs the socket ($%s); only the spool is set", sub, config.EnvSocket))
	}
	if err := spool.ValidateClientID(f.ID); err != nil {
		return intentUsageError(err)
	}
	data, err := json.Marshal(f)
	if err != nil {
		return err
	}
	var rnd [4]byte
	rand.Read(rnd[:])
	name := fmt.Sprintf("%020d-%s-%s", time.Now().UnixNano(), sub, hex.EncodeToString(rnd[:]))
	if err := writeSpoolFile(dir, name, data); err != nil {
		return fmt.Errorf("intent: spool %s: %w", dir, err)
	}
	if out != nil {
		printJSON(*out)
	}
	return nil
}

// spoolIntent is the intent as tether will journal it from a spool file:
// its name is known when the client chose a ULID id; the owner label when
// $TETHER_OWNER is set; scope labels from $TETHER_LABELS.
func spoolIntent(id string, labels map[string]string, onDrain spool.OnDrain) *spool.Intent {
	all := map[string]string{}
	if v := os.Getenv(config.EnvLabels); v != "" {
		for _, kv := range strings.Split(v, ",") {
			if k, val, ok := strings.Cut(strings.TrimSpace(kv), "="); ok && k != "" {
				all[k] = val
			}
		}
	}
	for k, v := range labels {
		all[k] = v
	}
	in := &spool.Intent{Labels: all, OnDrain: onDrain, State: spool.Pending, Key: id, CreatedAt: time.Now().UTC()}
	in.UpdatedAt = in.CreatedAt
	if spool.ValidateIntentID(id) == nil {
		in.ID, in.Name = id, spool.NamePrefix+id
		all[spool.LabelIntent] = id
	} else {
		in.ID = id // the client id; tether assigns the intent id
	}
	if owner := os.Getenv(config.EnvOwner); owner != "" {
		all[spool.LabelOwner] = owner
	}
	return in
}

// writeSpoolFile writes .NAME.tmp, fsyncs it, and renames it to NAME.json:
// tether never sees a half-written file, and the file survives a crash of
// the machine once this returns.
func writeSpoolFile(dir, name string, data []byte) error {
	tmp := filepath.Join(dir, "."+name+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(append(data, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name+".json"))
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
