package spooldir

import (
	"testing"

	"go.uber.org/goleak"
)

// The reader's watcher, its rescans and the deletes it starts: none may outlive the test that started it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
