package bus

import (
	"fmt"
	"strings"
	"testing"
)

func TestStackHeaderIsOneBoundedLine(t *testing.T) {
	short := "goroutine 7 [running]:\nmain.f()\n\t/src/main.go:12 +0x1d\n"
	if got, want := stackHeader([]byte(short)), "goroutine 7 [running]: | main.f() | /src/main.go:12 +0x1d"; got != want {
		t.Errorf("stackHeader(short) = %q, want %q", got, want)
	}

	var b strings.Builder
	b.WriteString("goroutine 7 [running]:\n")
	for i := range 1000 {
		fmt.Fprintf(&b, "main.f%d()\n\t/src/main.go:%d +0x1d\n", i, i)
	}
	got := stackHeader([]byte(b.String()))
	if len(got) > maxStackHeader {
		t.Errorf("header of a deep stack is %d bytes, want at most %d", len(got), maxStackHeader)
	}
	if strings.ContainsAny(got, "\r\n") {
		t.Error("the header has a line break")
	}
	if !strings.HasPrefix(got, "goroutine 7 [running]: | main.f0() | /src/main.go:0 +0x1d | main.f1()") {
		t.Errorf("the header does not start with the top of the stack: %.120q", got)
	}
	if !strings.HasSuffix(got, " more lines") {
		t.Errorf("the header does not say lines were left out: ...%q", got[max(0, len(got)-60):])
	}
	// Cut at a line boundary: the line before the note is a whole frame line.
	parts := strings.Split(got, " | ")
	if last := parts[len(parts)-2]; !strings.HasSuffix(last, "()") && !strings.HasSuffix(last, " +0x1d") {
		t.Errorf("the line before the note is cut: %q", last)
	}
}
