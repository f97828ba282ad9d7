package stuckdetector

// This file recognises args that are already canonical, so that
// canonicalArgs can return them as they are instead of decoding and
// re-encoding them: builders write args with encoding/json, which sorts
// keys and adds no space, and a write_file call's args hold a whole file.

import (
	"bytes"
	"strings"
	"unicode/utf8"
)

// maxCanonicalDepth bounds the nesting the check follows; deeper args take
// the slow path, which applies encoding/json's own limit.
const maxCanonicalDepth = 64

// isCanonicalObject reports whether b is a non-empty JSON object exactly as
// canonicalArgs would write it: decoding it (numbers kept as written) and
// encoding it again without HTML escaping gives b back. That holds for one
// value with no white space outside strings, object keys without escapes in
// strictly increasing byte order (encoding/json sorts map keys, and a
// duplicate key would be dropped), numbers as JSON writes them, and strings
// that are valid UTF-8 whose only escapes are \" \\ \n \r \t and that hold
// no control character, DEL, U+2028 or U+2029. It says no to anything else,
// which the slow path then handles: a false no costs time, never a verdict.
func isCanonicalObject(b []byte) bool {
	if len(b) < 2 || b[0] != '{' || b[1] == '}' {
		return false
	}
	s := canonicalScan{b: b}
	return s.value(0) && s.i == len(b)
}

// canonicalScan walks one JSON text for isCanonicalObject.
type canonicalScan struct {
	b []byte
	i int
}

func (s *canonicalScan) value(depth int) bool {
	if depth > maxCanonicalDepth || s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '{':
		return s.object(depth)
	case c == '[':
		return s.array(depth)
	case c == '"':
		_, _, ok := s.str()
		return ok
	case c == '-' || '0' <= c && c <= '9':
		return s.number()
	default:
		return s.literal("true") || s.literal("false") || s.literal("null")
	}
}

func (s *canonicalScan) object(depth int) bool {
	s.i++ // {
	if s.next('}') {
		return true
	}
	var prev []byte
	for first := true; ; first = false {
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return false
		}
		key, escaped, ok := s.str()
		if !ok || escaped || (!first && bytes.Compare(prev, key) >= 0) {
			return false
		}
		prev = key
		if !s.next(':') || !s.value(depth+1) {
			return false
		}
		if s.next('}') {
			return true
		}
		if !s.next(',') {
			return false
		}
	}
}

func (s *canonicalScan) array(depth int) bool {
	s.i++ // [
	if s.next(']') {
		return true
	}
	for {
		if !s.value(depth + 1) {
			return false
		}
		if s.next(']') {
			return true
		}
		if !s.next(',') {
			return false
		}
	}
}

// next consumes c if it is the next byte.
func (s *canonicalScan) next(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str consumes a string and returns its bytes between the quotes and
// whether it has an escape.
func (s *canonicalScan) str() (content []byte, escaped, ok bool) {
	s.i++ // "
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			content = s.b[start:s.i]
			s.i++
			return content, escaped, true
		case c == '\\':
			if s.i+1 >= len(s.b) || strings.IndexByte(`"\nrt`, s.b[s.i+1]) < 0 {
				return nil, false, false
			}
			escaped = true
			s.i += 2
		case c < 0x20 || c == 0x7f:
			return nil, false, false
		case c < utf8.RuneSelf:
			s.i++
		default:
			r, size := utf8.DecodeRune(s.b[s.i:])
			if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
				return nil, false, false
			}
			s.i += size
		}
	}
	return nil, false, false
}

// number consumes a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *canonicalScan) number() bool {
	s.next('-')
	switch {
	case s.next('0'):
	case s.i < len(s.b) && '1' <= s.b[s.i] && s.b[s.i] <= '9':
		s.digits()
	default:
		return false
	}
	if s.next('.') && !s.digits() {
		return false
	}
	if s.next('e') || s.next('E') {
		if !s.next('+') {
			s.next('-')
		}
		if !s.digits() {
			return false
		}
	}
	return true
}

// digits consumes one or more digits.
func (s *canonicalScan) digits() bool {
	start := s.i
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}

func (s *canonicalScan) literal(word string) bool {
	if bytes.HasPrefix(s.b[s.i:], []byte(word)) {
		s.i += len(word)
		return true
	}
	return false
}
