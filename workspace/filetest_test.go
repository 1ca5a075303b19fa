package workspace_test

import (
	"context"
	"testing"

	"github.com/bothyhq/bothy/filetest"
	"github.com/bothyhq/bothy/workspace"
)

func TestFileService(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			filetest.TestFileService(t, func(t *testing.T) *filetest.Env {
				store, blobs := b.open(t)
				e := &env{t: t, ctx: context.Background(), store: store, blobs: blobs}
				tenant := e.newTenant()
				fs := workspace.New(store, blobs, workspace.Options{MaxFileSize: 1 << 16, MaxBatch: 8})
				return &filetest.Env{
					Files: fs, TenantID: tenant, Other: fs, OtherTenantID: e.newTenant(),
					NewComputer: func(t *testing.T) string { return (&env{t: t, ctx: e.ctx, store: store}).newComputer(tenant) },
					MaxFileSize: 1 << 16, MaxBatch: 8,
				}
			})
		})
	}
}
