package bothy_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/bothyhq/bothy"
)

func TestErrorCode(t *testing.T) {
	wrapped := fmt.Errorf("commit: %w", bothy.Errorf(bothy.ECONFLICT, "stale base"))
	if got := bothy.ErrorCode(wrapped); got != bothy.ECONFLICT {
		t.Fatalf("ErrorCode(wrapped) = %q", got)
	}
	if got := bothy.ErrorMessage(wrapped); got != "stale base" {
		t.Fatalf("ErrorMessage(wrapped) = %q", got)
	}
	plain := errors.New("disk on fire")
	if bothy.ErrorCode(plain) != bothy.EINTERNAL || bothy.ErrorMessage(plain) != "internal error" {
		t.Fatalf("a plain error must show as internal, got %q %q", bothy.ErrorCode(plain), bothy.ErrorMessage(plain))
	}
	if bothy.ErrorCode(nil) != "" {
		t.Fatal("ErrorCode(nil) must be empty")
	}
}

func TestValidateBlobKey(t *testing.T) {
	for _, k := range []string{"a", "packs/t1/0123abcd", "x.y_z-1/b"} {
		if err := bothy.ValidateBlobKey(k); err != nil {
			t.Errorf("ValidateBlobKey(%q) = %v", k, err)
		}
	}
	for _, k := range []string{"", "/a", "a/", "a//b", "../a", "a/./b", "a/..", "a b", "a\x00b", "a\\b", string(make([]byte, 513))} {
		if err := bothy.ValidateBlobKey(k); bothy.ErrorCode(err) != bothy.EINVALID {
			t.Errorf("ValidateBlobKey(%q) = %v, want invalid", k, err)
		}
	}
}

func TestValidateID(t *testing.T) {
	for _, id := range []string{"a", "cmp_1", "A-b.c", "x123"} {
		if err := bothy.ValidateID("id", id); err != nil {
			t.Errorf("ValidateID(%q) = %v", id, err)
		}
	}
	for _, id := range []string{"", "-a", ".a", "a/b", "a b", "ä", string(make([]byte, 129))} {
		if err := bothy.ValidateID("id", id); bothy.ErrorCode(err) != bothy.EINVALID {
			t.Errorf("ValidateID(%q) = %v, want invalid", id, err)
		}
	}
}

func TestCanTransition(t *testing.T) {
	if !bothy.CanTransition(bothy.CommandDispatched, bothy.CommandMayHaveStarted) {
		t.Error("dispatched → may_have_started must be allowed")
	}
	for _, s := range []string{bothy.CommandCompleted, bothy.CommandFailed, bothy.CommandCancelled, bothy.CommandTimedOut, bothy.CommandLost} {
		if !bothy.CommandTerminal(s) {
			t.Errorf("%s must be terminal", s)
		}
		for _, to := range []string{bothy.CommandAdmitted, bothy.CommandDispatched, bothy.CommandRunning} {
			if bothy.CanTransition(s, to) {
				t.Errorf("terminal %s → %s must be refused", s, to)
			}
		}
	}
	if bothy.CanTransition(bothy.CommandRunning, bothy.CommandDispatched) {
		t.Error("running → dispatched would re-dispatch")
	}
}
