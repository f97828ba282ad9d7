package compaction

import (
	"slices"
	"strings"
	"testing"
)

const summary = `## Key Decisions
- Keep the RALPH prefix.

## Errors & Solutions
- load_test.go failed on the NATS URL; fixed by setting RALPH_NATS_URL.

## Modified Files
- pkg/config/load.go

## Critical Context
- The reviewer runs scripts/check.sh.`

func TestMissingFacts(t *testing.T) {
	files := []string{"pkg/config/load.go", "pkg/config/load_test.go", "", "pkg/config/load_test.go"}
	errs := []string{"panic: nil map write\ngoroutine 1 [running]:", "load_test.go failed on the NATS URL"}
	got := MissingFacts(summary, files, errs)
	want := []string{"pkg/config/load_test.go", "panic: nil map write\ngoroutine 1 [running]:"}
	if !slices.Equal(got, want) {
		t.Errorf("MissingFacts = %q, want %q", got, want)
	}
	if got := MissingFacts(summary, []string{"pkg/config/load.go"}, nil); len(got) != 0 {
		t.Errorf("nothing missing: %q", got)
	}
}

func TestAppendMissingFacts(t *testing.T) {
	files := []string{"pkg/config/load.go", "docs/release-notes/v2.0.md"}
	errs := []string{"panic: nil map write\ngoroutine 1 [running]:"}
	out := AppendMissingFacts(summary, files, errs)
	if len(MissingFacts(out, files, errs)) != 0 {
		t.Errorf("facts still missing:\n%s", out)
	}
	// Each goes at the end of its own section, before the next heading.
	wantFiles := "## Modified Files\n- pkg/config/load.go\n- docs/release-notes/v2.0.md\n\n## Critical Context"
	if !strings.Contains(out, wantFiles) {
		t.Errorf("file not under Modified Files:\n%s", out)
	}
	wantErr := "fixed by setting RALPH_NATS_URL.\n- Unresolved: panic: nil map write\n  goroutine 1 [running]:\n\n## Modified Files"
	if !strings.Contains(out, wantErr) {
		t.Errorf("error not under Errors & Solutions, whole:\n%s", out)
	}
	if !strings.HasPrefix(out, summary[:40]) || !strings.HasSuffix(out, "scripts/check.sh.") {
		t.Errorf("the rest of the summary moved:\n%s", out)
	}
	if AppendMissingFacts(out, files, errs) != out {
		t.Errorf("appending again changed a complete summary")
	}

	// A summary without the headings gets them at the end.
	bare := "Worked on the config loader."
	out = AppendMissingFacts(bare, []string{"a.go"}, []string{"exit status 2"})
	want := "Worked on the config loader.\n\n## Modified Files\n- a.go\n\n## Errors & Solutions\n- Unresolved: exit status 2\n"
	if out != want {
		t.Errorf("bare summary:\n%q\nwant\n%q", out, want)
	}
	// Headings are matched whatever their case or a trailing colon.
	out = AppendMissingFacts("## modified files:\n- x.go\n", []string{"y.go"}, nil)
	if out != "## modified files:\n- x.go\n- y.go\n" {
		t.Errorf("loose heading: %q", out)
	}
}
