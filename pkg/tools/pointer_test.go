package tools

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

func TestPointers(t *testing.T) {
	w, _ := newTree(t)
	mustWrite(t, filepath.Join(w.Root(), "a&b <1>.md"), "the draft\n")
	arts := &fakeArtifacts{items: map[string]string{"a-1": "full output", `a"b`: "quoted id"}}
	e := NewExecutor(w, arts, Options{})
	tests := []struct {
		name, got, want string
		// back is what the pointer's call returns.
		back string
	}{
		{"artifact", ArtifactPointer("20480 bytes in 310 lines", "a-1"),
			`[20480 bytes in 310 lines, stored whole as artifact a-1; call read_artifact {"id": "a-1"} to read all of it]`, "full output"},
		{"artifact id needing quotes", ArtifactPointer("3 tokens", `a"b`),
			`[3 tokens, stored whole as artifact a"b; call read_artifact {"id": "a\"b"} to read all of it]`, "quoted id"},
		{"file", FilePointer("812 tokens replaced by a pointer", "a&b <1>.md"),
			`[812 tokens replaced by a pointer, in the file a&b <1>.md; call read_file {"path": "a&b <1>.md"} to read it as it is now]`, "the draft\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Errorf("pointer\n got: %s\nwant: %s", tc.got, tc.want)
			}
			// The call in the pointer is one the model can make as written,
			// and it brings the text back.
			_, call, _ := strings.Cut(tc.got, "; call ")
			name, rest, _ := strings.Cut(call, " ")
			args := rest[:strings.LastIndex(rest, "}")+1]
			res, err := e.Execute(t.Context(), name, args)
			if err != nil || res.Error != "" || !strings.Contains(res.Output, tc.back) {
				t.Errorf("the pointer's call %s %s = %+v, %v; want %q", name, args, res, err, tc.back)
			}
		})
	}
}

func TestPointerDigestKeepsWholeLines(t *testing.T) {
	var b strings.Builder
	for i := 0; i < 1000; i++ {
		b.WriteString(strings.Repeat("x", i%50))
		b.WriteString("|end\n")
	}
	text := b.String()
	d := PointerDigest(text, "a-1", 2000)
	head, _, _ := strings.Cut(d, "\n")
	if head != ArtifactPointer(fmt.Sprintf("%d bytes in %d lines", len(text), 1001), "a-1") || !strings.Contains(d, "lines not shown") {
		t.Fatalf("digest:\n%s", d)
	}
	for _, line := range strings.Split(d, "\n")[1:] {
		if line != "" && !strings.HasSuffix(line, "|end") && !strings.HasPrefix(line, "[") {
			t.Fatalf("line cut mid-way: %q", line)
		}
	}
}
