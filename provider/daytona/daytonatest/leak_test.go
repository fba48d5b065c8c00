package daytonatest_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Hung requests, scheduled state changes and the test server itself: none may outlive the test that started it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
