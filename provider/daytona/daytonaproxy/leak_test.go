package daytonaproxy

import (
	"testing"

	"go.uber.org/goleak"
)

// A create forwarded on its own context, the id journaled in the background, the reverse proxy's connections: none may outlive the test that started it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
