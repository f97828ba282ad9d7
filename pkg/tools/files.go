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
		return "", fmt.Sprintf("%s: path %q is a directory, not a file; use list_dir to see its entries", tool, display)
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
	abs, display, msg := e.resolveArg(toolReadFile, a.str("path", ""))
	if msg != "" {
		return Result{Error: msg}
	}
	offset := a.integer("offset_line", 1)
	limit := a.integer("limit_lines", 0)
	if offset < 1 {
		return fail("%s: argument \"offset_line\" must be 1 or more (lines are numbered from 1), got %d", toolReadFile, offset)
	}
	if a.has("limit_lines") && limit < 1 {
		return fail("%s: argument \"limit_lines\" must be 1 or more, got %d", toolReadFile, limit)
	}
	content, msg := readText(toolReadFile, abs, display)
	if msg != "" {
		return Result{Error: msg}
	}
	if !a.has("offset_line") && !a.has("limit_lines") {
		return Result{Output: content}
	}
	// SplitAfter keeps each line's newline, so the range is returned exactly
	// as it is in the file and no line is ever cut.
	lines := strings.SplitAfter(content, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if offset > len(lines) && offset > 1 {
		return fail("%s: argument \"offset_line\" is %d but %q has only %d lines", toolReadFile, offset, display, len(lines))
	}
	start := min(offset-1, len(lines))
	end := len(lines)
	if limit > 0 {
		end = min(start+limit, len(lines))
	}
	return Result{Output: strings.Join(lines[start:end], "")}
}

func (e *Executor) writeFile(a args) Result {
	abs, display, msg := e.resolveArg(toolWriteFile, a.str("path", ""))
	if msg != "" {
		return Result{Error: msg}
	}
	content := a.str("content", "")
	if fi, err := os.Stat(abs); err == nil && fi.IsDir() {
		return fail("%s: path %q is a directory; give a file path", toolWriteFile, display)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return fail("%s: creating parent directories of %q: %s", toolWriteFile, display, reason(err))
	}
	// os.WriteFile keeps the mode of an existing file, so an executable
	// script stays executable when the model rewrites it.
	if err := os.WriteFile(abs, []byte(content), 0o644); err != nil {
		return fail("%s: writing path %q: %s", toolWriteFile, display, reason(err))
	}
	return Result{
		Output:       fmt.Sprintf("wrote %d bytes to %s", len(content), display),
		FilesChanged: []string{display},
	}
}

func (e *Executor) editFile(a args) Result {
	abs, display, msg := e.resolveArg(toolEditFile, a.str("path", ""))
	if msg != "" {
		return Result{Error: msg}
	}
	old, repl := a.str("old", ""), a.str("new", "")
	all := a.boolean("replace_all", false)
	if old == "" {
		return fail("%s: argument \"old\" must not be empty; to create or overwrite a whole file use write_file", toolEditFile)
	}
	if old == repl {
		return fail("%s: arguments \"old\" and \"new\" are identical, so there is nothing to change", toolEditFile)
	}
	content, msg := readText(toolEditFile, abs, display)
	if msg != "" {
		return Result{Error: msg}
	}
	n := strings.Count(content, old)
	switch {
	case n == 0:
		return fail("%s: argument \"old\" was not found in %q; it must match the file exactly, including whitespace (read_file shows the current content)", toolEditFile, display)
	case n > 1 && !all:
		return fail("%s: argument \"old\" was found %d times in %q; include more surrounding context to make it unique, or set replace_all to true", toolEditFile, n, display)
	}
	updated := strings.ReplaceAll(content, old, repl)
	if err := os.WriteFile(abs, []byte(updated), 0o644); err != nil {
		return fail("%s: writing path %q: %s", toolEditFile, display, reason(err))
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
	abs, display, msg := e.resolveArg(toolListDir, a.str("path", "."))
	if msg != "" {
		return Result{Error: msg}
	}
	fi, err := os.Stat(abs)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fail("%s: path %q does not exist", toolListDir, display)
		}
		return fail("%s: path %q: %s", toolListDir, display, reason(err))
	}
	if !fi.IsDir() {
		return fail("%s: path %q is a file, not a directory; use read_file to read it", toolListDir, display)
	}
	entries, err := os.ReadDir(abs) // sorted by name
	if err != nil {
		return fail("%s: reading directory %q: %s", toolListDir, display, reason(err))
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
