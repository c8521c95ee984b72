package bench

import (
	"os"
	"testing"

	"github.com/dataccel/dataccel/internal/testenv"
)

// srv is the real S3 server the end-to-end tests upload to and read from.
var srv *testenv.Server

func TestMain(m *testing.M) { os.Exit(testenv.Run(m, &srv)) }
