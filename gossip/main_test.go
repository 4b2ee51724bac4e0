package gossip

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine outlives the tests: every
// Cluster a test starts must be shut down, and memberlist must stop all of
// its goroutines on Shutdown. goleak retries for a while before failing, so
// goroutines that are on their way out (memberlist closes channels and
// connections on Shutdown but does not wait for its goroutines) are not
// reported.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
