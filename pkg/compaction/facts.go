package compaction

import (
	"strings"
)

// The summary headings the facts go under (docs/design-origins.md, "The
// four-section summary").
const (
	headingModifiedFiles = "## Modified Files"
	headingErrors        = "## Errors & Solutions"
)

// MissingFacts lists the modified files and unresolved errors a summary
// does not mention, files first, each once, in the order given. A file is
// mentioned when its path appears in the summary; an error when its first
// line does (a summary quotes the message, not the whole trace).
func MissingFacts(summary string, modifiedFiles, unresolvedErrors []string) []string {
	files, errs := missing(summary, modifiedFiles, unresolvedErrors)
	return append(files, errs...)
}

func missing(summary string, modifiedFiles, unresolvedErrors []string) (files, errs []string) {
	seen := map[string]bool{}
	scan := func(facts []string) []string {
		var out []string
		for _, f := range facts {
			key := firstLine(f)
			if key == "" || seen[key] {
				continue
			}
			seen[key] = true
			if !strings.Contains(summary, key) {
				out = append(out, strings.TrimSpace(f))
			}
		}
		return out
	}
	return scan(modifiedFiles), scan(unresolvedErrors)
}

// AppendMissingFacts returns summary with every modified file and
// unresolved error it does not mention added as a bullet under its summary
// heading: at the end of the "## Modified Files" or "## Errors &
// Solutions" section when the summary has one, in a new section at the end
// when it does not. A summary that mentions everything comes back as is.
func AppendMissingFacts(summary string, modifiedFiles, unresolvedErrors []string) string {
	files, errs := missing(summary, modifiedFiles, unresolvedErrors)
	var fileBullets, errBullets []string
	for _, f := range files {
		fileBullets = append(fileBullets, "- "+f)
	}
	for _, e := range errs {
		// A multi-line error stays whole: its later lines continue the bullet.
		errBullets = append(errBullets, "- Unresolved: "+strings.ReplaceAll(e, "\n", "\n  "))
	}
	out := summary
	if len(fileBullets) > 0 {
		out = addToSection(out, headingModifiedFiles, fileBullets)
	}
	if len(errBullets) > 0 {
		out = addToSection(out, headingErrors, errBullets)
	}
	return out
}

// addToSection appends bullets to the section under heading, or adds the
// section at the end.
func addToSection(summary, heading string, bullets []string) string {
	lines := strings.Split(summary, "\n")
	start := -1
	for i, l := range lines {
		if isHeading(l, heading) {
			start = i
			break
		}
	}
	if start < 0 {
		body := strings.TrimRight(summary, "\n")
		if body != "" {
			body += "\n\n"
		}
		return body + heading + "\n" + strings.Join(bullets, "\n") + "\n"
	}
	end := len(lines)
	for i := start + 1; i < len(lines); i++ {
		if strings.HasPrefix(strings.TrimSpace(lines[i]), "#") {
			end = i
			break
		}
	}
	// Insert after the section's last non-blank line, keeping the blank
	// lines that separate it from the next section.
	at := end
	for at > start+1 && strings.TrimSpace(lines[at-1]) == "" {
		at--
	}
	out := make([]string, 0, len(lines)+len(bullets))
	out = append(out, lines[:at]...)
	out = append(out, bullets...)
	out = append(out, lines[at:]...)
	return strings.Join(out, "\n")
}

func isHeading(line, heading string) bool {
	l := strings.TrimSpace(line)
	l = strings.TrimSpace(strings.TrimSuffix(l, ":"))
	return strings.EqualFold(strings.Join(strings.Fields(l), " "), heading)
}

func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if t := strings.TrimSpace(l); t != "" {
			return t
		}
	}
	return ""
}
