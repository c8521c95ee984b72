package localcopy

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails a run whose tests pass but leave goroutines behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
