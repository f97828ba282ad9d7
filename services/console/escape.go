package console

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Escape makes s safe to print on a terminal as part of one line. Text in
// events comes from models, PRD authors and tool arguments; printed raw, an
// ESC sequence in it could clear the screen, move the cursor or retitle the
// terminal, and a carriage return or newline could overwrite the line or
// fake one ("✔ session completed"). So every C0 control but the tab
// (newlines included), DEL, every C1 control, the bidirectional controls
// that reorder how a line reads, and every byte that is not UTF-8 (a lone
// 0x9b is CSI to an 8-bit terminal) is written as a visible Go-style escape:
// \r, \n, \x1b, \u009b, \u202e, \xff. Everything else, UTF-8 included,
// passes unchanged.
func Escape(s string) string { return escape(s, false) }

// EscapeLines is Escape for a text of several lines, such as an error
// message: its newlines stay, every other control is escaped.
func EscapeLines(s string) string { return escape(s, true) }

// escape is the one rule behind Escape and EscapeLines.
func escape(s string, keepNewlines bool) string {
	clean := true
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if unsafe(r, size, keepNewlines) {
			clean = false
			break
		}
		i += size
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case !unsafe(r, size, keepNewlines):
			b.WriteString(s[i : i+size])
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += size
	}
	return b.String()
}

// unsafe reports whether the rune r, size bytes long in the text, must be
// escaped.
func unsafe(r rune, size int, keepNewlines bool) bool {
	switch {
	case r == utf8.RuneError && size == 1:
		return true
	case r == '\t':
		return false
	case r == '\n':
		return !keepNewlines
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	}
	return bidiControl(r)
}

// bidiControl reports the characters that change the direction text is
// shown in (the "Trojan Source" characters): they can make a line read
// differently from what it says.
func bidiControl(r rune) bool {
	return r == 0x061c || r == 0x200e || r == 0x200f || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}

// EscapeJSON makes one line of JSON, as encoding/json writes it, safe to
// print: encoding/json already escapes the C0 controls and replaces
// invalid UTF-8, but writes DEL, the C1 controls and the bidirectional
// controls as they are. Those can occur only inside strings, where \uXXXX
// means the same character, so the result is the same JSON value.
func EscapeJSON(line []byte) []byte {
	s := string(line)
	clean := true
	for _, r := range s {
		if r == 0x7f || (r >= 0x80 && r <= 0x9f) || bidiControl(r) {
			clean = false
			break
		}
	}
	if clean {
		return line
	}
	var b strings.Builder
	for _, r := range s {
		if r == 0x7f || (r >= 0x80 && r <= 0x9f) || bidiControl(r) {
			fmt.Fprintf(&b, `\u%04x`, r)
			continue
		}
		b.WriteRune(r)
	}
	return []byte(b.String())
}
