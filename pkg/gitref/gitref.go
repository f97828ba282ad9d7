// Package gitref owns the names the platform gives git: a session's branch
// (the PRD's, else ralph/<slug of its title>) and a remote to push to. Its
// rules are a conservative subset of git's, so that a name checked here can
// never be read by git as an option or a revision range. It has no
// dependencies, so that event validation can use it.
package gitref

import (
	"fmt"
	"regexp"
	"strings"
)

// Prefix starts the branch a session takes when its PRD names none.
const Prefix = "ralph/"

var branchPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._/+-]{0,199}$`)

// ValidBranch refuses a branch name outside letters, digits and ._/+-,
// one starting with '-' or '.', and what git forbids of those ("..",
// "//", "/.", a trailing '/', '.' or ".lock").
func ValidBranch(name string) error {
	switch {
	case !branchPattern.MatchString(name):
		return fmt.Errorf("branch name %q: use letters, digits and . _ / + - only, starting with a letter, digit or _ (at most 200)", name)
	case strings.Contains(name, "..") || strings.Contains(name, "//") || strings.Contains(name, "/.") ||
		strings.HasSuffix(name, "/") || strings.HasSuffix(name, ".") || strings.HasSuffix(name, ".lock"):
		return fmt.Errorf("branch name %q: git does not allow it (no '..', '//' or '/.', no trailing '/', '.' or '.lock')", name)
	}
	return nil
}

var remotePattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,99}$`)

// ValidRemote refuses what cannot be a configured remote's name (a URL, an
// option).
func ValidRemote(name string) error {
	if !remotePattern.MatchString(name) || strings.Contains(name, "..") {
		return fmt.Errorf("remote %q: the name of a configured remote is letters, digits and . _ - (like origin)", name)
	}
	return nil
}

// maxSlug bounds the slug of a title.
const maxSlug = 50

// Slug is title in lower case with every run of other characters than
// ASCII letters and digits made one '-', at most 50 characters, cut at a
// '-' when it can be: "Add the API (v2)!" is "add-the-api-v2".
func Slug(title string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(title) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			b.WriteRune(r)
			dash = false
			continue
		}
		dash = true
	}
	s := b.String()
	if len(s) > maxSlug {
		s = s[:maxSlug]
		if i := strings.LastIndexByte(s, '-'); i > maxSlug/2 {
			s = s[:i]
		}
	}
	return strings.Trim(s, "-")
}

// DefaultBranch is the branch of a session whose PRD names none:
// ralph/<slug of the title>, or ralph/<slug of fallback> (the PRD file's
// name) for a PRD without a title, or ralph/session.
func DefaultBranch(title, fallback string) string {
	for _, s := range []string{title, fallback} {
		if slug := Slug(s); slug != "" {
			return Prefix + slug
		}
	}
	return Prefix + "session"
}
