package tools

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// Hash fingerprints the workspace at root as "sha256:<hex>" over the sorted
// workspace-relative paths and contents of its regular files. The builder
// compares it after each iteration to learn whether anything changed, which
// run cannot report. .git is skipped because git bookkeeping (index,
// refs) changes without the work changing; symlinks and empty directories
// are not content and are skipped too.
func Hash(root string) (string, error) {
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", fmt.Errorf("hashing workspace %q: %w", root, err)
	}
	var files []string
	err = filepath.WalkDir(real, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Name() == ".git" && p != real {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() {
			rel, err := filepath.Rel(real, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("hashing workspace %q: %w", root, err)
	}
	// Walk order is per directory; sorting full paths makes the digest
	// depend on nothing but the set of files and their bytes.
	sort.Strings(files)
	sum := sha256.New()
	for _, rel := range files {
		content, err := hashFile(filepath.Join(real, filepath.FromSlash(rel)))
		if err != nil {
			return "", fmt.Errorf("hashing workspace %q: file %s: %w", root, rel, err)
		}
		// Each record is path NUL content-digest newline; a path cannot
		// contain NUL, so no two workspaces share a record stream.
		fmt.Fprintf(sum, "%s\x00%x\n", rel, content)
	}
	return "sha256:" + hex.EncodeToString(sum.Sum(nil)), nil
}

func hashFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}
