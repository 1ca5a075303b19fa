package agent

import (
	"os"
	"testing"

	"github.com/bothyhq/bothy/process"
	"github.com/bothyhq/bothy/supervisor"
)

// TestMain makes the test binary a supervisor too, as the bothy binary is
// (`bothy supervisor -dir DIR`), so that an agent under test can spawn one
// per lease.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "supervisor" {
		os.Exit(supervisor.Main(os.Args[2:], process.New()))
	}
	os.Exit(m.Run())
}
