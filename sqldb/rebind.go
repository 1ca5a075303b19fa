package sqldb

import (
	"strconv"
	"strings"
)

// RebindDollar rewrites '?' placeholders as $1, $2, … for PostgreSQL. A '?'
// inside a quoted string, a quoted identifier or a comment is left alone.
func RebindDollar(query string) string {
	var b strings.Builder
	b.Grow(len(query) + 8)
	n := 0
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case c == '\'' || c == '"':
			j := i + 1
			for j < len(query) && query[j] != c {
				j++
			}
			b.WriteString(query[i:min(j+1, len(query))])
			i = j
		case c == '-' && i+1 < len(query) && query[i+1] == '-':
			j := strings.IndexByte(query[i:], '\n')
			if j < 0 {
				j = len(query) - i - 1
			}
			b.WriteString(query[i : i+j+1])
			i += j
		case c == '?':
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
