package testutil

import (
	"flag"
	"runtime"
	"strconv"
)

// WaitingParallel sets -test.parallel to perCPU tests per GOMAXPROCS (and
// at least perCPU*2), unless the command line gave -parallel: for a package
// whose tests mostly wait (on other processes, sped-up leases, drain
// deadlines, simulated delays), not on this process's CPU, so more of them
// overlap than go test's default of one per GOMAXPROCS. The tests of such a
// package must not depend on a tight deadline: each wait has its own generous
// bound (WaitBound), as the extra load stretches them. Call it from TestMain
// after flag.Parse.
func WaitingParallel(perCPU int) {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if set {
		return
	}
	n := perCPU * max(runtime.GOMAXPROCS(0), 2)
	flag.Set("test.parallel", strconv.Itoa(n))
}
