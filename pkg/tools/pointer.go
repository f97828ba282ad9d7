package tools

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// ArtifactPointer is the line that stands in the model's context for a text
// kept whole as artifact id: what the text is (what, e.g. "20480 bytes in
// 310 lines"), where it is, and the read_artifact call that brings it back,
// ready to copy. Every part of the mesh that takes a text out of the context
// and keeps it in an artifact (the builder's large outputs, the pruner's
// oversized units, the summarizer's pointers and rewrites) writes this one
// line, so the model learns one form. Callers put whole lines of the text
// after it, never a cut one.
func ArtifactPointer(what, id string) string {
	return fmt.Sprintf("[%s, stored whole as artifact %s; call %s {\"id\": %s} to read all of it]", what, id, ReadArtifact, jsonString(id))
}

// FilePointer is ArtifactPointer for a text the workspace holds: the file
// at path, which the model reads back with read_file as it is now (it may
// have changed since the text was taken out).
func FilePointer(what, path string) string {
	return fmt.Sprintf("[%s, in the file %s; call %s {\"path\": %s} to read it as it is now]", what, path, ReadFile, jsonString(path))
}

// jsonString quotes s as a JSON string, so that the call in a pointer is
// valid arguments whatever the id or path holds. `<` and `&` stay as they
// are: the model reads them.
func jsonString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	// Encoding a string cannot fail: invalid UTF-8 is replaced.
	_ = enc.Encode(s)
	return string(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
}

// PointerDigest stands for text, kept whole as artifact id, with its
// ArtifactPointer line (its size in bytes and lines) and whole lines from
// its head and tail, within about budget bytes: half for the head, the rest
// for the tail, with a line saying how many lines are not shown between
// them. A line that does not fit is left out whole, never cut.
func PointerDigest(text, id string, budget int) string {
	lines := strings.Split(text, "\n")
	used, nHead := 0, 0
	for _, l := range lines {
		if used+len(l)+1 > budget/2 {
			break
		}
		used += len(l) + 1
		nHead++
	}
	nTail := 0
	for k := len(lines) - 1; k >= nHead; k-- {
		if used+len(lines[k])+1 > budget {
			break
		}
		used += len(lines[k]) + 1
		nTail++
	}
	var b strings.Builder
	b.WriteString(SizePointer(text, id) + "\n")
	b.WriteString(strings.Join(lines[:nHead], "\n"))
	if omitted := len(lines) - nHead - nTail; omitted > 0 {
		fmt.Fprintf(&b, "\n[... %d lines not shown ...]\n", omitted)
	} else {
		b.WriteString("\n")
	}
	b.WriteString(strings.Join(lines[len(lines)-nTail:], "\n"))
	return b.String()
}

// SizePointer is the ArtifactPointer line of text kept as artifact id,
// describing it by its size: PointerDigest's first line, alone.
func SizePointer(text, id string) string {
	return ArtifactPointer(fmt.Sprintf("%d bytes in %d lines", len(text), strings.Count(text, "\n")+1), id)
}

// pointerLineRE matches the lines a pointer adds around the text it stands
// for: the ArtifactPointer and FilePointer lines and PointerDigest's count
// of the lines not shown.
var pointerLineRE = regexp.MustCompile(`^\[(?:.*, stored whole as artifact .*; call ` + ReadArtifact + ` \{.*\} to read all of it|` +
	`.*, in the file .*; call ` + ReadFile + ` \{.*\} to read it as it is now|\.\.\. \d+ lines not shown \.\.\.)\]$`)

// belowPointer is text without its first line when that line is a
// pointer's (a PointerDigest's head).
func belowPointer(text string) string {
	if first, rest, ok := strings.Cut(text, "\n"); ok && IsPointerLine(first) {
		return rest
	}
	return text
}

// IsPointerLine reports whether line (trimmed) is one that a pointer adds:
// it says where a text is, not what the text says, so the rules that look
// for what a text says (ErrorLine) pass over it.
func IsPointerLine(line string) bool {
	return strings.HasPrefix(line, "[") && pointerLineRE.MatchString(line)
}
