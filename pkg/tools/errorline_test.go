package tools

import (
	"strings"
	"testing"
)

func TestErrorLine(t *testing.T) {
	tests := []struct {
		name, text, want string
	}{
		{"blank", "\n  \n", ""},
		{"go test: the FAIL line, not the bare FAIL",
			"=== RUN   TestLoad\n--- FAIL: TestLoad (0.00s)\n    load_test.go:9: boom\nFAIL\n", "--- FAIL: TestLoad (0.00s)"},
		{"pytest: past the banner to the error",
			"=================== FAILURES ===================\n____ test_x ____\nE       AssertionError: assert 1 == 2\n", "E       AssertionError: assert 1 == 2"},
		{"an error beats an earlier FAILED banner",
			"> Task :app:test FAILED\n\nOrderServiceTest > refundCannotExceedCapture() FAILED\n    org.opentest4j.AssertionFailedError: expected: <1> but was: <2>\n\nBUILD FAILED in 4s\n",
			"org.opentest4j.AssertionFailedError: expected: <1> but was: <2>"},
		{"a traceback by its error, not its header",
			"Traceback (most recent call last):\n  File \"/work/pipeline/cli.py\", line 6, in main\nKeyError: 'currency'\n", "KeyError: 'currency'"},
		{"a compiler error by a phrase", "# acme\nvet: ./a.go:3:2: undefined: Foo\n", "vet: ./a.go:3:2: undefined: Foo"},
		{"npm's ERR!", "npm WARN old lockfile\nnpm ERR! code ERESOLVE\n", "npm ERR! code ERESOLVE"},
		{"a tool error", `error: read_file: path "x" does not exist`, `error: read_file: path "x" does not exist`},
		{"an error after output", "partial output\nerror: timed out after 2m0s", "error: timed out after 2m0s"},
		{"phrases are whole words", "checking refundCannotExceedCapture\nconnection refused by db:5432\n", "connection refused by db:5432"},
		{"a one-word line names nothing", "error\nwhile loading the config\n", "error"},
		{"no words for it: the first line", "\n  checking 12 files\nprofiles/p07.md: source missing\n", "checking 12 files"},
		{"a digest: the first line of the output, not the pointer",
			PointerDigest("checking 12 files\n"+strings.Repeat("ok\n", 1000)+"profiles/p07.md: source missing\n", "a-1f2e3d4c5b6a7988", 200), "checking 12 files"},
		{"a digest showing no line: nothing",
			PointerDigest(strings.Repeat("x", 500), "a-1f2e3d4c5b6a7988", 200), ""},
		{"a file pointer is no error line", FilePointer("the draft", "notes/errors.md") + "\nchecking 12 files", "checking 12 files"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ErrorLine(tc.text); got != tc.want {
				t.Errorf("ErrorLine = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestNamesError(t *testing.T) {
	for line, want := range map[string]bool{
		"KeyError: 'currency'":                  true,
		"  permission denied: /etc/shadow":      true,
		"--- FAIL: TestLoad (0.00s)":            true,
		"FAIL":                                  false,
		"=== FAILURES ===":                      false,
		"Traceback (most recent call last):":    false,
		"refundCannotExceedCapture passed":      false,
		"the draft explains the outage":         false,
		"0 errors, 2 warnings":                  true,
		"docs/architecture.md: 12 lines edited": false,
	} {
		if got := NamesError(line); got != want {
			t.Errorf("NamesError(%q) = %v, want %v", line, got, want)
		}
	}
}

func TestTextErrorLine(t *testing.T) {
	tests := []struct {
		name, text, want string
	}{
		{"a success", "exit code 0\n--- FAIL: TestOld was renamed", ""},
		{"a file that talks about failures", "She said the failures are where the lessons are.\nAn error: of judgement.", ""},
		{"a failed run: below the exit code", "exit code 2\nlint.go:3: error: unused variable x", "lint.go:3: error: unused variable x"},
		{"a failed run without error words: its first line", "exit code 1\nchecking 12 files\nprofiles/p07.md: source missing", "checking 12 files"},
		{"a tool error", `error: read_file: path "gone.txt" does not exist`, `error: read_file: path "gone.txt" does not exist`},
		{"a killed run", "exit code -1\npartial output\nerror: timed out after 2m0s", "error: timed out after 2m0s"},
		{"a failed run shown as a digest", PointerDigest("exit code 1\n"+strings.Repeat("checking\n", 1000)+"lint.go:3: error: unused variable x", "a-1", 400),
			"lint.go:3: error: unused variable x"},
		{"a successful run shown as a digest", PointerDigest("exit code 0\n"+strings.Repeat("--- FAIL: TestOld was renamed\n", 1000), "a-1", 400), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := TextErrorLine(tc.text); got != tc.want {
				t.Errorf("TextErrorLine = %q, want %q", got, tc.want)
			}
		})
	}
}
