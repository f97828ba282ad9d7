package tools

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ErrPathEscape is wrapped by every Resolve error caused by a path that
// would lead outside the workspace.
var ErrPathEscape = errors.New("path escapes the workspace")

// maxSymlinks bounds symlink expansion in Resolve, like the kernel's ELOOP
// limit, so that a symlink cycle is an error instead of a hang.
const maxSymlinks = 255

// Workspace is a directory the agent may touch.
type Workspace struct {
	root string // absolute, symlink-free
}

// NewWorkspace returns the workspace rooted at root, which must be an
// existing directory. The root is stored symlink-free so that confinement
// checks compare real paths with a real path.
func NewWorkspace(root string) (*Workspace, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("workspace root %q: %w", root, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("workspace root %q: %w", root, err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return nil, fmt.Errorf("workspace root %q: %w", root, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("workspace root %q is not a directory", root)
	}
	return &Workspace{root: real}, nil
}

// Root is the absolute, symlink-free workspace directory.
func (w *Workspace) Root() string { return w.root }

// escapeError names the offending path while still matching ErrPathEscape
// under errors.Is.
type escapeError struct {
	path string
	why  string
}

func (e *escapeError) Error() string {
	msg := fmt.Sprintf("path %q escapes the workspace", e.path)
	if e.why != "" {
		msg += ": " + e.why
	}
	return msg
}

func (e *escapeError) Unwrap() error { return ErrPathEscape }

// Resolve turns a workspace-relative path into the absolute, symlink-free
// path that tools must operate on. Paths that do not exist yet are allowed
// (write_file creates them). The returned path, not the joined one, is what
// callers use: every existing component has already been resolved, so a
// symlink cannot redirect the operation after the check.
func (w *Workspace) Resolve(rel string) (string, error) {
	if rel == "" {
		return "", errors.New("path is empty")
	}
	if filepath.IsAbs(rel) || strings.HasPrefix(rel, "/") {
		return "", &escapeError{path: rel, why: "absolute paths are not allowed; use a path relative to the workspace root"}
	}
	clean := filepath.Clean(rel)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", &escapeError{path: rel}
	}
	real, err := realPath(w.root, clean)
	if err != nil {
		return "", fmt.Errorf("resolving path %q: %w", rel, err)
	}
	if !within(w.root, real) {
		return "", &escapeError{path: rel, why: "a symlink leads outside"}
	}
	return real, nil
}

// within reports whether p is base or below it; both must be clean.
func within(base, p string) bool {
	if p == base {
		return true
	}
	if !strings.HasSuffix(base, string(filepath.Separator)) { // base "/" already ends in one
		base += string(filepath.Separator)
	}
	return strings.HasPrefix(p, base)
}

// realPath expands every symlink in root/rel component by component, the way
// the kernel would, stopping expansion at the first component that does not
// exist (everything after it is new and is taken literally). It exists
// because filepath.EvalSymlinks fails on dangling symlinks and lexical
// cleaning of a symlink target gets "dir-link/.." wrong; either gap would let
// a write land outside the workspace.
func realPath(root, rel string) (string, error) {
	resolved := root // always symlink-free, so ".." can be applied lexically
	pending := strings.Split(rel, "/")
	links := 0
	missing := false
	for len(pending) > 0 {
		comp := pending[0]
		pending = pending[1:]
		switch comp {
		case "", ".":
			continue
		case "..":
			resolved = filepath.Dir(resolved)
			continue
		}
		next := filepath.Join(resolved, comp)
		if missing {
			resolved = next
			continue
		}
		fi, err := os.Lstat(next)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
				missing = true
				resolved = next
				continue
			}
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			resolved = next
			continue
		}
		links++
		if links > maxSymlinks {
			return "", fmt.Errorf("more than %d symlinks", maxSymlinks)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			resolved = string(filepath.Separator)
		}
		pending = append(strings.Split(target, "/"), pending...)
	}
	return resolved, nil
}
