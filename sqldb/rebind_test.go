package sqldb_test

import (
	"testing"

	"github.com/bothyhq/bothy/sqldb"
)

func TestRebindDollar(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"SELECT 1", "SELECT 1"},
		{"a = ? AND b = ?", "a = $1 AND b = $2"},
		{"a = '?' AND b = ?", "a = '?' AND b = $1"},
		{`"x?" = ? -- what?` + "\n" + "AND c = ?", `"x?" = $1 -- what?` + "\n" + "AND c = $2"},
		{"a = 'it''s' AND b = ?", "a = 'it''s' AND b = $1"},
		{"unterminated '?", "unterminated '?"},
		{"-- trailing ?", "-- trailing ?"},
	} {
		if got := sqldb.RebindDollar(tt.in); got != tt.want {
			t.Errorf("RebindDollar(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
