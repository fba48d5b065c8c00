package dotenv

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Each case is how the TypeScript SDK's dotenv (v16) parses the line.
func TestParse(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want map[string]string
	}{
		{"A=1", map[string]string{"A": "1"}},
		{"A = 1 ", map[string]string{"A": "1"}},
		{"export A=1", map[string]string{"A": "1"}},
		{"A=", map[string]string{"A": ""}},
		{"A=1\nA=2", map[string]string{"A": "2"}}, // the last wins
		{"# A=1\nB=2", map[string]string{"B": "2"}},
		{"A=1 # a comment", map[string]string{"A": "1"}},
		{"A=http://h:3000/api#frag", map[string]string{"A": "http://h:3000/api"}},
		{"A='x # y'", map[string]string{"A": "x # y"}},
		{`A="x\ny"`, map[string]string{"A": "x\ny"}},
		{`A='x\ny'`, map[string]string{"A": `x\ny`}},
		{"A=`q`", map[string]string{"A": "q"}},
		{"A=\"multi\nline\"\nB=2", map[string]string{"A": "multi\nline", "B": "2"}},
		{"A=1\r\nB=2\r\n", map[string]string{"A": "1", "B": "2"}},
		{"A: 1", map[string]string{"A": "1"}},
		{"just words\nA=1", map[string]string{"A": "1"}},
		{"A.B-C=1", map[string]string{"A.B-C": "1"}},
		{`A="unterminated`, map[string]string{"A": `"unterminated`}},
		{"", map[string]string{}},
	} {
		got := Parse(tc.src)
		if len(got) != len(tc.want) {
			t.Errorf("%q: %q, want %q", tc.src, got, tc.want)
			continue
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("%q: %s=%q, want %q", tc.src, k, got[k], v)
			}
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"A=1", "export A='b'\n#c\nD=\"e\\nf\"", "A=`x`", "A: b # c", "\x00=\n="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		for k := range Parse(src) {
			if k == "" || strings.ContainsAny(k, " \t\n=#") {
				t.Fatalf("key %q from %q", k, src)
			}
		}
	})
}

func write(t *testing.T, path, body string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

// TestPrecedence: the environment (even empty) over .env.local over .env;
// only the prefix's variables; the origin of each.
func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, ".env.local"), "P_B=local\nP_C=local\n", 0o600)
	write(t, filepath.Join(dir, ".env"), "P_A=file\nP_B=file\nP_C=file\nP_D=file\nOTHER=file\n", 0o644)
	s, problems := Load(dir, "P_")
	if len(problems) != 0 {
		t.Fatal(problems)
	}
	env := map[string]string{"P_A": "env", "P_D": ""}
	s.lookup = func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	for _, tc := range []struct{ name, value, origin string }{
		{"P_A", "env", FromEnv},
		{"P_B", "local", FromEnvLocal},
		{"P_C", "local", FromEnvLocal},
		{"P_D", "", FromDefault}, // set empty in the environment: it wins, and reads as unset
		{"P_E", "", FromDefault},
		{"OTHER", "", FromDefault}, // not the prefix's
	} {
		if v, o := s.Get(tc.name), s.Origin(tc.name); v != tc.value || o != tc.origin {
			t.Errorf("%s: %q from %s, want %q from %s", tc.name, v, o, tc.value, tc.origin)
		}
	}
	if _, _, path, _ := s.Lookup("P_B"); path != filepath.Join(dir, ".env.local") {
		t.Errorf("P_B's path %q", path)
	}
}

// TestUntrustedFilesAreIgnored: a file others may write, one owned by
// another user, a named pipe (that must not hang the start) and a file
// over the bound are each ignored with a reason naming the file.
func TestUntrustedFilesAreIgnored(t *testing.T) {
	cases := []struct {
		name  string
		make  func(t *testing.T, path string)
		says  string
		needs string
	}{
		{"writable by others", func(t *testing.T, p string) { write(t, p, "P_A=x\n", 0o666) }, "chmod go-w", ""},
		{"writable by the group", func(t *testing.T, p string) { write(t, p, "P_A=x\n", 0o664) }, "chmod go-w", ""},
		{"owned by another user", func(t *testing.T, p string) {
			write(t, p, "P_A=x\n", 0o644)
			if err := os.Chown(p, 1000, 1000); err != nil {
				t.Fatal(err)
			}
		}, "owned by uid 1000", "root"},
		{"a named pipe", func(t *testing.T, p string) {
			if err := syscall.Mkfifo(p, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file", ""},
		{"too large", func(t *testing.T, p string) {
			write(t, p, "P_A=x\n"+strings.Repeat("#", MaxFileSize), 0o600)
		}, "larger than", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.needs == "root" && os.Geteuid() != 0 {
				t.Skip("needs root to chown")
			}
			dir := t.TempDir()
			path := filepath.Join(dir, ".env")
			tc.make(t, path)
			s, problems := Load(dir, "P_")
			if len(problems) != 1 || !strings.Contains(problems[0].Error(), path) || !strings.Contains(problems[0].Error(), tc.says) {
				t.Fatalf("problems %v, want one naming %s and %q", problems, path, tc.says)
			}
			s.lookup = func(string) (string, bool) { return "", false }
			if v := s.Get("P_A"); v != "" {
				t.Errorf("P_A=%q read from an ignored file", v)
			}
		})
	}
}

func TestAmbiguous(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, ".env"), "P_A=${HOME}/x\nP_B=plain\nP_C=\"a\\\\b\"\n", 0o600)
	s, _ := Load(dir, "P_")
	s.lookup = func(string) (string, bool) { return "", false }
	got := strings.Join(s.Ambiguous(), ",")
	if !strings.Contains(got, "P_A") || !strings.Contains(got, "P_C") || strings.Contains(got, "P_B") {
		t.Errorf("ambiguous: %s", got)
	}
}
