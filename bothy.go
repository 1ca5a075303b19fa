// Package bothy holds the domain of bothy, durable computers for AI agents:
// the types (tenants, computers, revisions, leases, commands, events,
// receipts), the errors, and the interfaces that the storage, runtime and API
// packages implement. It imports only the standard library.
//
// A computer is a durable record, not a machine. Its workspace is a chain of
// committed revisions: each revision names a root tree digest in a
// content-addressed checkpoint format (package checkpoint), whose packs live in
// a BlobStore, while the metadata lives in a Store.
package bothy

import "time"

// Now is the clock used by domain code; tests may replace it.
var Now = func() time.Time { return time.Now().UTC() }
