package bothy

import (
	"bytes"
	"context"
	"encoding/json"
	"time"
)

// Event kinds.
const (
	EventStdout    = "stdout"    // Data holds output bytes
	EventStderr    = "stderr"    // Data holds output bytes
	EventExit      = "exit"      // Fields holds the exit code or signal
	EventState     = "state"     // Fields holds a state change of the command
	EventTruncated = "truncated" // retained output was cut here; the rest is only in the archive
)

// ValidEventKind reports whether k is one of the event kinds.
func ValidEventKind(k string) bool {
	switch k {
	case EventStdout, EventStderr, EventExit, EventState, EventTruncated:
		return true
	}
	return false
}

// Limits on appended events.
const (
	MaxEventData    = 1 << 20 // bytes of Data plus Fields per event
	MaxEventsAppend = 1000    // events per AppendEvents call
)

// Event is one sequenced record of a command. Seq counts 1, 2, 3 … per
// command with no gaps, so a reader resumes exactly after the last seq it
// saw.
type Event struct {
	TenantID  string `json:"-"`
	CommandID string `json:"command_id"`
	Seq       int64  `json:"seq"`
	Kind      string `json:"kind"`
	Data      []byte `json:"data,omitempty"`
	// Fields is a JSON object, or "".
	Fields    string    `json:"fields,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// Validate reports whether e can be appended. It does not check TenantID,
// CommandID or Seq, which AppendEvents sets or checks.
func (e *Event) Validate() error {
	if !ValidEventKind(e.Kind) {
		return Errorf(EINVALID, "unknown event kind %q", e.Kind)
	} else if e.Seq < 0 {
		return Errorf(EINVALID, "event seq must not be negative")
	} else if len(e.Data)+len(e.Fields) > MaxEventData {
		return Errorf(ETOOLARGE, "an event holds at most %d bytes", MaxEventData)
	} else if e.Fields != "" && !json.Valid([]byte(e.Fields)) {
		return Errorf(EINVALID, "event fields must be JSON")
	}
	return nil
}

// SameContent reports whether e and o record the same thing: kind, data and
// fields. Times and identifiers are not compared.
func (e *Event) SameContent(o *Event) bool {
	return e.Kind == o.Kind && bytes.Equal(e.Data, o.Data) && e.Fields == o.Fields
}

// EventService stores the events of commands. Every method is scoped by
// tenant.
type EventService interface {
	// AppendEvents stores events for the command, in one transaction, and
	// sets the command's LastSeq to the newest seq (and Truncated if a
	// truncated event is among them). The batch must be contiguous. If every
	// event has Seq 0, AppendEvents assigns LastSeq+1, LastSeq+2, … and
	// writes them back into events. Otherwise each Seq is verified: a seq
	// already stored with the same content is a no-op (a runtime re-sends
	// after a reconnect), with different content ECONFLICT; a seq past
	// LastSeq+1 leaves a gap and is EINVALID. Nothing is stored unless the
	// whole batch is.
	//
	// A runtime passes its generation: the command must have been
	// dispatched at it, its lease must still be unreleased at it, and a
	// terminal command takes no new events; otherwise ECONFLICT. Generation
	// 0 means the control plane itself appends, unfenced; the runtime
	// protocol takes a runtime's generation from its credential, never from
	// its messages. A missing command is ENOTFOUND. While a runtime streams
	// a command, only it should append, because two writers of seqs would
	// conflict.
	AppendEvents(ctx context.Context, tenantID, commandID string, generation int64, events []Event) error
	// ListEvents returns the command's events with seq greater than
	// afterSeq, in seq order, at most limit (0 means 100, capped at 1000).
	// A missing command, or one of another tenant, has no events. A
	// negative afterSeq or limit is EINVALID.
	ListEvents(ctx context.Context, tenantID, commandID string, afterSeq int64, limit int) ([]*Event, error)
}
