package computetest_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/computetest"
	"github.com/bothyhq/bothy/sqlite"
)

// fakeRuntime is the Fake as the suite's Runtime.
type fakeRuntime struct{ *computetest.Fake }

func (r fakeRuntime) Finish(t *testing.T, tenantID, id, state string, exit int) {
	r.Fake.Finish(t, tenantID, id, state, exit)
}

func TestFake(t *testing.T) {
	computetest.TestComputeService(t, func(t *testing.T) *computetest.Env {
		s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "bothy.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		for _, id := range []string{"t1", "t2"} {
			if err := s.CreateTenant(t.Context(), &bothy.Tenant{ID: id, HashKey: make([]byte, 32)}); err != nil {
				t.Fatal(err)
			}
		}
		fake := computetest.NewFake(s)
		n := 0
		return &computetest.Env{
			Compute: fake, TenantID: "t1", Other: fake, OtherTenantID: "t2", Runtime: fakeRuntime{fake},
			NewComputer: func(t *testing.T) string {
				n++
				c := &bothy.Computer{ID: fmt.Sprintf("cmp%d", n), TenantID: "t1", Owner: "o", Profile: "standard", State: bothy.StateCold}
				if err := s.CreateComputer(t.Context(), c); err != nil {
					t.Fatal(err)
				}
				return c.ID
			},
		}
	})
}
