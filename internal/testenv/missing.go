package testenv

import (
	"fmt"
	"os"
	"testing"
)

// SkipMissingEnv names the variable that lets tests skip what needs a part
// the machine lacks (root, /dev/fuse, a kernel feature, a tool). Unset, as
// in CI, such a test fails: CI has every part, and a skip there would pass
// with nothing tested.
const SkipMissingEnv = "DATACCEL_TEST_SKIP_MISSING"

// Missing ends t for a part the machine lacks: a skip when SkipMissingEnv
// is set, else a failure that says how to skip.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	why := fmt.Sprintf(format, args...)
	if os.Getenv(SkipMissingEnv) != "" {
		t.Skip(why)
	}
	t.Fatalf("%s (set %s=1 to skip what needs it)", why, SkipMissingEnv)
}
