package e2b_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The client's connections and the simulator's waiting handlers: none may
// outlive the test that started them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
