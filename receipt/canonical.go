package receipt

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Canonical returns the canonical JSON encoding of v, which must marshal
// (with encoding/json) to JSON whose numbers are all integers. The encoding
// is RFC 8785 (JCS) for that subset: object members sorted by the UTF-16
// code units of their names, no insignificant whitespace, strings escaped
// only where JSON requires it (", \ and control characters, with the short
// forms \b \f \n \r \t and otherwise \u00xx in lower case), integers in
// decimal without sign, leading zeros or exponent unless needed. A
// duplicate member name or a number that is not an integer is an error.
func Canonical(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("canonical json: %w", err)
	}
	return CanonicalizeJSON(raw)
}

// CanonicalizeJSON re-encodes a JSON document canonically (see Canonical).
func CanonicalizeJSON(doc []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var b bytes.Buffer
	if err := canonicalValue(dec, &b); err != nil {
		return nil, fmt.Errorf("canonical json: %w", err)
	}
	if _, err := dec.Token(); err == nil {
		return nil, fmt.Errorf("canonical json: data after the value")
	}
	return b.Bytes(), nil
}

// canonicalValue reads one value from dec and writes it canonically to b.
func canonicalValue(dec *json.Decoder, b *bytes.Buffer) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			return canonicalObject(dec, b)
		case '[':
			b.WriteByte('[')
			for i := 0; dec.More(); i++ {
				if i > 0 {
					b.WriteByte(',')
				}
				if err := canonicalValue(dec, b); err != nil {
					return err
				}
			}
			_, err := dec.Token() // ']'
			b.WriteByte(']')
			return err
		}
		return fmt.Errorf("unexpected %v", t)
	case string:
		writeString(b, t)
	case json.Number:
		n, err := strconv.ParseInt(string(t), 10, 64)
		if err != nil {
			return fmt.Errorf("number %s is not a 64-bit integer", t)
		}
		b.WriteString(strconv.FormatInt(n, 10))
	case bool:
		b.WriteString(strconv.FormatBool(t))
	case nil:
		b.WriteString("null")
	default:
		return fmt.Errorf("unexpected token %v", tok)
	}
	return nil
}

// canonicalObject reads an object's members (after its '{') and writes
// them sorted.
func canonicalObject(dec *json.Decoder, b *bytes.Buffer) error {
	type member struct {
		key   string
		units []uint16
		value []byte
	}
	var members []member
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, ok := tok.(string)
		if !ok {
			return fmt.Errorf("object key %v is not a string", tok)
		} else if seen[key] {
			return fmt.Errorf("duplicate object member %q", key)
		}
		seen[key] = true
		var v bytes.Buffer
		if err := canonicalValue(dec, &v); err != nil {
			return err
		}
		members = append(members, member{key, utf16.Encode([]rune(key)), v.Bytes()})
	}
	if _, err := dec.Token(); err != nil { // '}'
		return err
	}
	slices.SortFunc(members, func(a, b member) int { return slices.Compare(a.units, b.units) })
	b.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			b.WriteByte(',')
		}
		writeString(b, m.key)
		b.WriteByte(':')
		b.Write(m.value)
	}
	b.WriteByte('}')
	return nil
}

// writeString writes s as a JSON string with JCS's minimal escaping.
// Invalid UTF-8 was already replaced by U+FFFD when the decoder read it.
func writeString(b *bytes.Buffer, s string) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte(hex[r>>4])
			b.WriteByte(hex[r&0xf])
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	b.WriteByte('"')
}
