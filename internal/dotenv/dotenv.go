// Package dotenv reads a provider's settings as its official SDKs read
// them: each variable from the process environment, else from .env.local,
// else from .env, in the working directory (Daytona's TypeScript SDK,
// libs/sdk-typescript/src/utils/Runtime.ts:66-95, and Python SDK,
// libs/sdk-python/src/daytona/_utils/env.py:11-38, at v0.190.0). tether
// points the child's API URL at its proxy, and that variable then wins
// over the runner's .env; reading the same files is how tether still
// forwards to the API the runner meant, with the credentials it meant.
//
// A variable set in the environment wins even when empty, as in the SDKs;
// an SDK then treats the empty value as unset (`||`), so Get does too.
//
// The files are outside input. One that another user could have written —
// owned by anyone but root or tether's own user, writable by group or
// others, or not a regular file — is ignored, and Load says why: it could
// send tether's credentials to a host of someone else's choosing.
package dotenv

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
)

// Where a setting came from.
const (
	FromEnv      = "env"
	FromEnvLocal = ".env.local"
	FromEnvFile  = ".env"
	// FromDefault: set nowhere (the provider's default applies).
	FromDefault = "default"
)

// MaxFileSize bounds what is read of one file (a .env is a few lines); a
// larger file is ignored.
const MaxFileSize = 1 << 20

// Settings are a provider's variables as its SDKs read them.
type Settings struct {
	// Dir is the directory the files were looked for in.
	Dir    string
	prefix string
	// files holds the variables of .env.local, then of .env, each with
	// the path it came from.
	files [2]file
	// lookup reads the process environment (os.LookupEnv).
	lookup func(string) (string, bool)
}

type file struct {
	path string
	vars map[string]string
}

// Load reads .env.local and .env in dir, keeping the variables whose name
// starts with prefix (as the SDKs keep only DAYTONA_*). A missing file is
// no problem; each file ignored is one error in problems, naming the file
// and what to change.
func Load(dir, prefix string) (s Settings, problems []error) {
	s = Settings{Dir: dir, prefix: prefix, lookup: os.LookupEnv}
	for i, name := range []string{FromEnvLocal, FromEnvFile} {
		path := filepath.Join(dir, name)
		s.files[i].path = path
		vars, err := readFile(path, prefix)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		s.files[i].vars = vars
	}
	return s, problems
}

// Lookup is the value of name and where it came from: the environment
// (even when empty), else .env.local, else .env; ok is false when it is
// set nowhere. path is the file's, "" for the environment.
func (s Settings) Lookup(name string) (value, origin, path string, ok bool) {
	if s.lookup != nil {
		if v, ok := s.lookup(name); ok {
			return v, FromEnv, "", true
		}
	}
	for i, origin := range []string{FromEnvLocal, FromEnvFile} {
		if v, ok := s.files[i].vars[name]; ok {
			return v, origin, s.files[i].path, true
		}
	}
	return "", FromDefault, "", false
}

// Get is the value of name as Lookup finds it ("" when set nowhere): what
// a provider's configuration reads in place of os.Getenv.
func (s Settings) Get(name string) string {
	v, _, _, _ := s.Lookup(name)
	return v
}

// Origin says where name came from: FromEnv, FromEnvLocal, FromEnvFile, or
// FromDefault when it is set nowhere or empty (an SDK treats an empty
// value as unset).
func (s Settings) Origin(name string) string {
	v, origin, _, ok := s.Lookup(name)
	if !ok || v == "" {
		return FromDefault
	}
	return origin
}

// Ambiguous names the variables from the files whose values the SDKs read
// differently (see ambiguous), each once, in the files' order.
func (s Settings) Ambiguous() []string {
	var out []string
	for _, f := range s.files {
		for k, v := range f.vars {
			if _, origin, _, _ := s.Lookup(k); origin != FromEnv && ambiguous(v) {
				out = append(out, f.path+": "+k)
			}
		}
	}
	slices.Sort(out)
	return out
}

// readFile reads the variables with prefix from the file at path, if tether
// may trust it; a missing file has none.
func readFile(path, prefix string) (map[string]string, error) {
	// O_NONBLOCK: a named pipe planted as .env must not hang the start.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: ignored: %w", path, errors.Unwrap(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: ignored: %w", path, err)
	}
	if err := trusted(fi); err != nil {
		return nil, fmt.Errorf("%s: ignored: %w", path, err)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: ignored: %w", path, err)
	}
	if len(b) > MaxFileSize {
		return nil, fmt.Errorf("%s: ignored: larger than %d bytes", path, MaxFileSize)
	}
	vars := map[string]string{}
	for k, v := range Parse(string(b)) {
		if strings.HasPrefix(k, prefix) {
			vars[k] = v
		}
	}
	return vars, nil
}

// tether's own uids, read once.
var selfEUID, selfUID = os.Geteuid(), os.Getuid()

// trusted reports why the opened file fi is not one tether may take
// settings from: only root and tether's own user may have written it (the
// child runs as tether's user, so its files are tether's).
func trusted(fi os.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("not a regular file (mode %s)", fi.Mode().Type())
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if ok {
		uid := int(st.Uid)
		if uid != 0 && uid != selfEUID && uid != selfUID {
			return fmt.Errorf("owned by uid %d, not by tether's user (uid %d) or root: another user could choose where tether sends its credentials (chown it, or remove it)", uid, selfEUID)
		}
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("mode %s lets others write to it: another user could choose where tether sends its credentials (chmod go-w it)", fi.Mode().Perm())
	}
	return nil
}

// line is one assignment as the TypeScript SDK's dotenv matches it (its
// LINE in lib/main.js, the same in v16 and v17; Daytona's monorepo pins
// ^17.0.1 at v0.190.0): an optional "export", a key, "=" or ": ", and a value that is
// quoted (', " or `, spanning lines) or runs to a "#" or the line's end;
// a comment may follow. Go's regexp has the same leftmost-first semantics
// for it.
var line = regexp.MustCompile("(?m)(?:^|^)\\s*(?:export\\s+)?([\\w.-]+)(?:\\s*=\\s*?|:\\s+?)(\\s*'(?:\\\\'|[^'])*'|\\s*\"(?:\\\\\"|[^\"])*\"|\\s*`(?:\\\\`|[^`])*`|[^#\\r\\n]+)?\\s*(?:#.*)?(?:$|$)")

// quoted strips a value's matching outer quotes.
var quoted = regexp.MustCompile("^(['\"`])([\\s\\S]*)['\"`]$")

// Parse reads the assignments of a .env file as the TypeScript SDK's
// dotenv does: a later assignment of a key wins; a value is trimmed, its
// outer quotes removed, and in double quotes \n and \r become line breaks.
// Python's python-dotenv agrees for the plain values credentials and URLs
// are; where it does not, Ambiguous says so.
func Parse(src string) map[string]string {
	out := map[string]string{}
	src = strings.ReplaceAll(strings.ReplaceAll(src, "\r\n", "\n"), "\r", "\n")
	for _, m := range line.FindAllStringSubmatch(src, -1) {
		key, value := m[1], strings.TrimSpace(m[2])
		q := byte(0)
		if value != "" {
			q = value[0]
		}
		if sm := quoted.FindStringSubmatch(value); sm != nil && sm[1][0] == value[len(value)-1] {
			value = sm[2]
		}
		if q == '"' {
			value = strings.ReplaceAll(strings.ReplaceAll(value, `\n`, "\n"), `\r`, "\r")
		}
		out[key] = value
	}
	return out
}

// ambiguous: a value the Python SDK's python-dotenv reads otherwise than
// Parse: it expands ${VAR}, and it undoes backslash escapes in double
// quotes that dotenv keeps.
func ambiguous(v string) bool {
	return strings.Contains(v, "${") || strings.Contains(v, `\`)
}
