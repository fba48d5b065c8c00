package reaper

import (
	"flag"
	"testing"

	"go.uber.org/goleak"

	"github.com/tether-run/tether/internal/testutil"
)

// A drain cut short by its deadline, a hung call, a panicking intent: none
// may leave a worker goroutine behind. The tests wait on simulated delays,
// retries and deadlines more than they compute: more run at once.
func TestMain(m *testing.M) {
	flag.Parse()
	testutil.WaitingParallel(4)
	goleak.VerifyTestMain(m)
}
