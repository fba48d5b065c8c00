package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/tether-run/tether/internal/config"
)

// stdout is where help goes (asked for, so it is output, exit 0); usage
// errors go to stderr through exitError. A variable so tests can capture it.
var stdout io.Writer = os.Stdout

// newFlags is a subcommand's flag set. usage is printed, with the flags
// after it, on -h/--help.
func newFlags(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet("tether "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned, in one style, by parseFlags
	fs.Usage = func() {
		fs.SetOutput(stdout)
		fmt.Fprint(stdout, usage)
		if hasFlags(fs) {
			fmt.Fprint(stdout, "\nFlags:\n")
			fs.PrintDefaults()
		}
		fs.SetOutput(io.Discard)
	}
	return fs
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// flagSetSeen, when set (by the test that writes docs/configuration.md),
// is shown every flag set a subcommand parses.
var flagSetSeen func(*flag.FlagSet)

// errHelpShown: -h was asked for and the usage printed; the command exits 0.
var errHelpShown = errors.New("help shown")

// parseFlags parses args with fs. On -h it prints the usage to stdout and
// returns errHelpShown; a bad flag is a usage error. maxArgs bounds the
// arguments left after the flags (-1: any number).
func parseFlags(fs *flag.FlagSet, args []string, maxArgs int) error {
	if flagSetSeen != nil {
		flagSetSeen(fs)
	}
	// The flag package calls Usage on every parse error, not only on -h:
	// a bad flag must be one line on stderr, not the help on stdout too.
	usage := fs.Usage
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.Usage = usage
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.Usage()
			return errHelpShown
		}
		return usageError(fs, badValue(fs, err))
	}
	if maxArgs >= 0 && fs.NArg() > maxArgs {
		return usageError(fs, fmt.Errorf("unexpected argument %q", fs.Arg(maxArgs)))
	}
	return nil
}

// flagValueError is how the flag package words a value it could not set.
var flagValueError = regexp.MustCompile(`^invalid (?:boolean )?value ("(?:[^"\\]|\\.)*") for (?:flag )?-([^:]+): (.*)$`)

// badValue rewords the flag package's "invalid value "x" for flag -grace:
// parse error" as the environment's path words it: the flag, the value as
// given, and the format expected.
func badValue(fs *flag.FlagSet, err error) error {
	m := flagValueError.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	value, name, why := m[1], m[2], m[3]
	if f := fs.Lookup(name); f != nil {
		if g, ok := f.Value.(flag.Getter); ok {
			switch g.Get().(type) {
			case time.Duration:
				why = "not a duration (e.g. 3s, 500ms, 2m)"
			case int, int64, uint, uint64:
				why = "not a whole number"
			case bool:
				why = "not true or false"
			case float64:
				why = "not a number"
			}
		}
	}
	if strings.Contains(why, value) {
		return fmt.Errorf("--%s: %s", name, why) // the reason quotes the value already
	}
	return fmt.Errorf("--%s %s: %s", name, value, why)
}

// parseConfig is parseFlags for a command that bound cfg's settings to fs
// (envErr is what Bind found wrong in the environment): then the
// environment's errors, then cfg.Validate, each a usage error.
func parseConfig(fs *flag.FlagSet, args []string, maxArgs int, cfg *config.Config, envErr error) error {
	if err := parseFlags(fs, args, maxArgs); err != nil {
		return err
	}
	if envErr != nil {
		return usageError(fs, envErr)
	}
	if err := cfg.Validate(); err != nil {
		return usageError(fs, err)
	}
	return nil
}

// usageError is every usage error of subcommand fs: exit 125, one line on
// stderr naming the command and where its help is.
func usageError(fs *flag.FlagSet, err error) error {
	return &exitError{Code: exitCodeUsage, Err: fmt.Errorf("%s: %w (see %s -h)", fs.Name()[len("tether "):], err, fs.Name())}
}

// helped turns errHelpShown into a clean exit.
func helped(err error) error {
	if errors.Is(err, errHelpShown) {
		return nil
	}
	return err
}

// count is n with the noun that fits it: "1 page", "2 pages".
func count(n int, one, many string) string {
	return fmt.Sprintf("%d %s", n, pick(n, one, many))
}

// pick is one when n is 1, else many.
func pick(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
