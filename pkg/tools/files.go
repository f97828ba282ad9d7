package tools

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// readText reads the regular text file at abs, with messages for the model
// naming tool and path when it cannot.
func readText(tool, abs, display string) (string, string) {
	fi, err := os.Stat(abs)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Sprintf("%s: path %q does not exist", tool, display)
		}
		return "", fmt.Sprintf("%s: path %q: %s", tool, display, reason(err))
	}
	if fi.IsDir() {
		return "", fmt.Sprintf("%s: path %q is a directory, not a file; use %s to see its entries", tool, display, ListDir)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Sprintf("%s: path %q is not a regular file", tool, display)
	}
	data, err := os.ReadFile(abs)
	if err != nil {
		return "", fmt.Sprintf("%s: reading path %q: %s", tool, display, reason(err))
	}
	// A NUL byte never occurs in text; sending binary to the model wastes
	// context and corrupts edits.
	if bytes.IndexByte(data, 0) >= 0 {
		return "", fmt.Sprintf("%s: path %q is a binary file (it contains NUL bytes); only text files can be read or edited", tool, display)
	}
	return string(data), ""
}

func (e *Executor) readFile(a args) Result {
	abs, display, msg := e.resolveArg(ReadFile, a.str("path", ""))
	if msg != "" {
		return Result{Error: msg}
	}
	offset, limit := a.integer("offset_line", 1), a.integer("limit_lines", 0)
	if msg := checkRange(ReadFile, a, offset, limit); msg != "" {
		return Result{Error: msg}
	}
	content, msg := readText(ReadFile, abs, display)
	if msg != "" {
		return Result{Error: msg}
	}
	out, msg := page(content, pageRequest{
		tool: ReadFile, what: display, next: readCall(ReadFile, "path", display),
		offset: offset, limit: limit, ranged: a.has("offset_line") || a.has("limit_lines"), pageBytes: e.opt.PageBytes,
		longLine: func(n int) string {
			return fmt.Sprintf("the run tool can show part of it, for example sed -n '%dp' %s | cut -c 1-2000", n, shellQuote(display))
		},
	})
	if msg != "" {
		return Result{Error: msg}
	}
	return Result{Output: out}
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func (e *Executor) writeFile(a args) Result {
	abs, display, msg := e.resolveArg(WriteFile, a.str("path", ""))
	if msg != "" {
		return Result{Error: msg}
	}
	content := a.str("content", "")
	if fi, err := os.Stat(abs); err == nil && fi.IsDir() {
		return fail("%s: path %q is a directory; give a file path", WriteFile, display)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return fail("%s: creating parent directories of %q: %s", WriteFile, display, reason(err))
	}
	// os.WriteFile keeps the mode of an existing file, so an executable
	// script stays executable when the model rewrites it.
	if err := os.WriteFile(abs, []byte(content), 0o644); err != nil {
		return fail("%s: writing path %q: %s", WriteFile, display, reason(err))
	}
	return Result{
		Output:       fmt.Sprintf("wrote %d bytes to %s", len(content), display),
		FilesChanged: []string{display},
	}
}

func (e *Executor) editFile(a args) Result {
	abs, display, msg := e.resolveArg(EditFile, a.str("path", ""))
	if msg != "" {
		return Result{Error: msg}
	}
	old, repl := a.str("old", ""), a.str("new", "")
	all := a.boolean("replace_all", false)
	if old == "" {
		return fail("%s: argument \"old\" must not be empty; to create or overwrite a whole file use %s", EditFile, WriteFile)
	}
	if old == repl {
		return fail("%s: arguments \"old\" and \"new\" are identical, so there is nothing to change", EditFile)
	}
	content, msg := readText(EditFile, abs, display)
	if msg != "" {
		return Result{Error: msg}
	}
	n := strings.Count(content, old)
	switch {
	case n == 0:
		return fail("%s: argument \"old\" was not found in %q; it must match the file exactly, including whitespace (%s shows the current content)", EditFile, display, ReadFile)
	case n > 1 && !all:
		return fail("%s: argument \"old\" was found %d times in %q; include more surrounding context to make it unique, or set replace_all to true", EditFile, n, display)
	}
	updated := strings.ReplaceAll(content, old, repl)
	if err := os.WriteFile(abs, []byte(updated), 0o644); err != nil {
		return fail("%s: writing path %q: %s", EditFile, display, reason(err))
	}
	noun := "occurrence"
	if n > 1 {
		noun = "occurrences"
	}
	return Result{
		Output:       fmt.Sprintf("replaced %d %s in %s", n, noun, display),
		FilesChanged: []string{display},
	}
}

func (e *Executor) listDir(a args) Result {
	abs, display, msg := e.resolveArg(ListDir, a.str("path", "."))
	if msg != "" {
		return Result{Error: msg}
	}
	fi, err := os.Stat(abs)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fail("%s: path %q does not exist", ListDir, display)
		}
		return fail("%s: path %q: %s", ListDir, display, reason(err))
	}
	if !fi.IsDir() {
		return fail("%s: path %q is a file, not a directory; use %s to read it", ListDir, display, ReadFile)
	}
	entries, err := os.ReadDir(abs) // sorted by name
	if err != nil {
		return fail("%s: reading directory %q: %s", ListDir, display, reason(err))
	}
	var b strings.Builder
	for _, ent := range entries {
		if ent.Name() == ".git" {
			continue
		}
		b.WriteString(ent.Name())
		isDir := ent.IsDir()
		if ent.Type()&fs.ModeSymlink != 0 {
			// Show a symlinked directory as a directory, since that is how
			// the other tools will treat it.
			if t, err := os.Stat(filepath.Join(abs, ent.Name())); err == nil && t.IsDir() {
				isDir = true
			}
		}
		if isDir {
			b.WriteString("/")
		}
		b.WriteString("\n")
	}
	if b.Len() == 0 {
		return Result{Output: fmt.Sprintf("(directory %s is empty)", display)}
	}
	return Result{Output: strings.TrimSuffix(b.String(), "\n")}
}
