//go:build crashpoints

package crashpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// Enabled reports whether this binary was built with crash points.
const Enabled = true

var (
	target string
	nth    int64 = 1
	hits   atomic.Int64
)

func init() {
	spec := os.Getenv(Env)
	name, n, ok := strings.Cut(spec, ":")
	target = name
	if ok {
		v, err := strconv.ParseInt(n, 10, 64)
		if err != nil || v < 1 {
			fmt.Fprintf(os.Stderr, "crashpoint: bad %s=%q: want NAME or NAME:N with N >= 1\n", Env, spec)
			os.Exit(125)
		}
		nth = v
	}
}

// Hit kills the process with SIGKILL when name is the point $TETHER_CRASHPOINT
// names and this is its Nth hit; otherwise it returns at once.
func Hit(name string) {
	if target == "" || name != target {
		return
	}
	n := hits.Add(1)
	if n != nth {
		return
	}
	fmt.Fprintf(os.Stderr, "crashpoint: %s hit %d\n", name, n)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL is not deferred; nothing after the point runs
}
