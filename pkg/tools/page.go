package tools

import (
	"fmt"
	"strings"
)

// A read (read_file, read_artifact) returns lines: the lines asked for with
// offset_line and limit_lines (the whole text when neither is given), as
// many of them as fit in one page of Options.PageBytes. A result that does
// not hold everything asked for ends with a line saying the text's size,
// which lines it holds and the call that reads the next page. Lines are
// never cut: a line longer than a page is not shown, and the result says so
// and how to see part of it.

// pageRequest is one read of a text by lines.
type pageRequest struct {
	tool string
	// what names the text in messages ("big.log", "artifact a-1").
	what string
	// next renders the call that reads from line offset, with limit lines
	// when limit > 0, as the model would write it.
	next func(offset, limit int) string
	// offset is the first line (1-based); limit the number of lines, 0 for
	// all; ranged is set when either was given.
	offset, limit int
	ranged        bool
	// pageBytes bounds the result; 0 leaves it unbounded.
	pageBytes int
	// longLine says how to see part of line n when it is longer than a
	// page; "" when nothing can.
	longLine func(n int) string
}

// page returns the result of r over text, or a message for the model when
// the range cannot be read.
func page(text string, r pageRequest) (string, string) {
	if !r.ranged && (r.pageBytes <= 0 || len(text) <= r.pageBytes) {
		return text, ""
	}
	// SplitAfter keeps each line's newline, so the range is returned exactly
	// as it is in the text and no line is ever cut.
	lines := strings.SplitAfter(text, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if r.offset > len(lines) && r.offset > 1 {
		return "", fmt.Sprintf("%s: argument \"offset_line\" is %d but %s has only %d lines", r.tool, r.offset, r.what, len(lines))
	}
	start := min(r.offset-1, len(lines))
	end := len(lines)
	if r.limit > 0 {
		end = min(start+r.limit, len(lines))
	}
	if r.pageBytes <= 0 {
		return strings.Join(lines[start:end], ""), ""
	}
	size := fmt.Sprintf("%s is %d bytes in %d lines", r.what, len(text), len(lines))
	// more is the line that ends a page holding lines start+1..last of the
	// range, which goes on to end.
	more := func(last int) string {
		limit := 0
		if r.limit > 0 {
			limit = end - last
		}
		return fmt.Sprintf("[%s; this page holds lines %d-%d; read the next page with %s]", size, start+1, last, r.next(last+1, limit))
	}
	used, n := 0, 0
	for start+n < end {
		l := len(lines[start+n])
		if start+n+1 == end {
			// The range's last line needs no line after it.
			if used+l > r.pageBytes {
				break
			}
		} else if used+l+len(more(start+n+1)) > r.pageBytes {
			break
		}
		used += l
		n++
	}
	if start+n == end {
		return strings.Join(lines[start:end], ""), ""
	}
	if n == 0 {
		msg := fmt.Sprintf("[%s; line %d is %d bytes, longer than a page (%d bytes), so it is not shown", size, start+1, len(lines[start]), r.pageBytes)
		if r.longLine != nil {
			msg += "; " + r.longLine(start+1)
		}
		if start+1 < end {
			limit := 0
			if r.limit > 0 {
				limit = end - start - 1
			}
			msg += "; " + r.next(start+2, limit) + " reads on from the next line"
		}
		return msg + "]", ""
	}
	var b strings.Builder
	b.Grow(used + 200)
	for _, l := range lines[start : start+n] {
		b.WriteString(l)
	}
	b.WriteString(more(start + n))
	return b.String(), ""
}

// readCall renders a call of tool with key=value (a path or an id) and the
// paging arguments, for a page's last line.
func readCall(tool, key, value string) func(offset, limit int) string {
	return func(offset, limit int) string {
		s := fmt.Sprintf("%s {%q: %s, \"offset_line\": %d", tool, key, jsonString(value), offset)
		if limit > 0 {
			s += fmt.Sprintf(", \"limit_lines\": %d", limit)
		}
		return s + "}"
	}
}
