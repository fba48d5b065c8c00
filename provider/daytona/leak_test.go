package daytona_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The API client's connections and retries: none may outlive the test that started it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
