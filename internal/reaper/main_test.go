package reaper

import (
	"testing"

	"go.uber.org/goleak"
)

// A drain cut short by its deadline, a hung call, a panicking intent: none
// may leave a worker goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
