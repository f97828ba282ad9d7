package tools

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

const (
	// maxSearchLine is the longest line search will scan; files with longer
	// lines (minified bundles, data dumps) are skipped rather than loaded
	// whole into memory.
	maxSearchLine = 1 << 20
	// maxMatchText bounds the text printed per match so that one long line
	// cannot flood the model's context.
	maxMatchText = 300
)

// errSearchDone stops the walk once max_results is reached.
var errSearchDone = errors.New("search: enough results")

func (e *Executor) search(ctx context.Context, a args) (Result, error) {
	pattern := a.str("pattern", "")
	re, err := regexp.Compile(pattern)
	if err != nil {
		return fail("%s: argument \"pattern\" %q is not a valid Go (RE2) regular expression: %v", Search, pattern, err), nil
	}
	maxResults := a.integer("max_results", 100)
	if maxResults < 1 {
		return fail("%s: argument \"max_results\" must be 1 or more, got %d", Search, maxResults), nil
	}
	abs, display, msg := e.resolveArg(Search, a.str("path", "."))
	if msg != "" {
		return Result{Error: msg}, nil
	}
	if _, err := os.Stat(abs); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fail("%s: path %q does not exist", Search, display), nil
		}
		return fail("%s: path %q: %s", Search, display, reason(err)), nil
	}

	var matches []string
	truncated := false
	walkErr := filepath.WalkDir(abs, func(p string, d fs.DirEntry, err error) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err != nil {
			// An unreadable corner of the tree should not hide matches
			// elsewhere.
			if d != nil && d.IsDir() && p != abs {
				return fs.SkipDir
			}
			return nil
		}
		if d.Name() == ".git" && p != abs {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		// Symlinks are not followed: WalkDir does not descend into linked
		// directories, and a linked file may point outside the workspace.
		if !d.Type().IsRegular() {
			return nil
		}
		found, more := searchFile(p, e.rel(p), re, maxResults-len(matches))
		matches = append(matches, found...)
		if more {
			truncated = true
			return errSearchDone
		}
		return nil
	})
	if walkErr != nil && !errors.Is(walkErr, errSearchDone) {
		if ctx.Err() != nil {
			return Result{}, fmt.Errorf("%s %q: %w", Search, pattern, ctx.Err())
		}
		return fail("%s: walking %q: %s", Search, display, reason(walkErr)), nil
	}
	if len(matches) == 0 {
		return Result{Output: fmt.Sprintf("no matches for pattern %q in %s", pattern, display)}, nil
	}
	out := strings.Join(matches, "\n")
	if truncated {
		out += fmt.Sprintf("\n[stopped at max_results=%d matches; there are more, so narrow the pattern or the path]", maxResults)
	}
	return Result{Output: out}, nil
}

// searchFile returns up to quota matching lines of the file at p, formatted
// "rel:line: text", and whether more matches exist beyond the quota. Binary
// files (any NUL byte) and unreadable files yield nothing.
func searchFile(p, rel string, re *regexp.Regexp, quota int) (found []string, more bool) {
	f, err := os.Open(p)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), maxSearchLine)
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		// The whole file is scanned even past the quota so that a NUL byte
		// late in the file still marks it binary and drops its matches.
		if bytes.IndexByte(line, 0) >= 0 {
			return nil, false
		}
		if !re.Match(line) {
			continue
		}
		if len(found) == quota {
			more = true
			continue
		}
		text := strings.TrimSuffix(string(line), "\r")
		found = append(found, fmt.Sprintf("%s:%d: %s", rel, n, shorten(text, maxMatchText)))
	}
	if sc.Err() != nil {
		return nil, false
	}
	return found, more
}
