package compactbench

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"
)

// workspace is the session's files in memory. Its tools give exactly what
// pkg/tools gives for the same files, and run gives what the workspace's
// check scripts print, computed in Go; the tests check both against the
// real executor and the real scripts.
type workspace struct {
	files map[string]string
}

func (w *workspace) clone() map[string]string {
	out := make(map[string]string, len(w.files))
	for k, v := range w.files {
		out[k] = v
	}
	return out
}

// toolResult is what a tool gives back: Output, or Error for a tool error,
// and ExitCode for run (pkg/tools.Result).
type toolResult struct {
	Output       string
	Error        string
	ExitCode     int
	FilesChanged []string
}

func (w *workspace) readFile(path string) toolResult {
	c, ok := w.files[path]
	if !ok {
		return toolResult{Error: fmt.Sprintf("read_file: path %q does not exist", path)}
	}
	return toolResult{Output: c}
}

func (w *workspace) writeFile(path, content string) toolResult {
	w.files[path] = content
	return toolResult{Output: fmt.Sprintf("wrote %d bytes to %s", len(content), path), FilesChanged: []string{path}}
}

// editFile replaces the one occurrence of old; the generator only makes
// edits that apply, so anything else is a bug in the session script.
func (w *workspace) editFile(path, old, repl string) (toolResult, error) {
	c, ok := w.files[path]
	if !ok {
		return toolResult{}, fmt.Errorf("edit_file %s: no such file", path)
	}
	if n := strings.Count(c, old); n != 1 {
		return toolResult{}, fmt.Errorf("edit_file %s: %q occurs %d times", path, old, n)
	}
	w.files[path] = strings.Replace(c, old, repl, 1)
	return toolResult{Output: fmt.Sprintf("replaced 1 occurrence in %s", path), FilesChanged: []string{path}}, nil
}

// listDir lists a directory's entries by name, directories with a slash.
func (w *workspace) listDir(dir string) toolResult {
	prefix := ""
	if dir != "." && dir != "" {
		prefix = strings.TrimSuffix(dir, "/") + "/"
	}
	seen := map[string]bool{}
	var names []string
	for p := range w.files {
		rest, ok := strings.CutPrefix(p, prefix)
		if !ok {
			continue
		}
		name, _, isDir := strings.Cut(rest, "/")
		if isDir {
			name += "/"
		}
		if !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	// os.ReadDir sorts by name, without the slash.
	sort.Slice(names, func(a, b int) bool {
		return strings.TrimSuffix(names[a], "/") < strings.TrimSuffix(names[b], "/")
	})
	return toolResult{Output: strings.Join(names, "\n")}
}

// search greps the files under dir, "path:line: text" per match.
func (w *workspace) search(pattern, dir string) toolResult {
	re := regexp.MustCompile(pattern)
	prefix := strings.TrimSuffix(dir, "/") + "/"
	var paths []string
	for p := range w.files {
		if strings.HasPrefix(p, prefix) {
			paths = append(paths, p)
		}
	}
	slices.Sort(paths)
	var matches []string
	for _, p := range paths {
		for n, line := range strings.Split(strings.TrimSuffix(w.files[p], "\n"), "\n") {
			if re.MatchString(line) {
				matches = append(matches, fmt.Sprintf("%s:%d: %s", p, n+1, shorten(line, 300)))
			}
		}
	}
	if len(matches) == 0 {
		return toolResult{Output: fmt.Sprintf("no matches for pattern %q in %s", pattern, dir)}
	}
	return toolResult{Output: strings.Join(matches, "\n")}
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// The workspace's check scripts, run with `sh scripts/...`.
const (
	cmdCheckProfiles = "sh scripts/check_profiles.sh"
	cmdCheckLinks    = "sh scripts/check_links.sh"
	cmdCheckFinal    = "sh scripts/check_final.sh"
)

// run simulates the check scripts: what they print is computed from the
// files, so a check passes exactly when the files are right, without a
// shell in the benchmark's path.
func (w *workspace) run(command string) (toolResult, error) {
	switch command {
	case cmdCheckProfiles:
		return w.checkProfiles(), nil
	case cmdCheckLinks:
		return w.checkLinks(), nil
	case cmdCheckFinal:
		return w.checkFinal(), nil
	}
	return toolResult{}, fmt.Errorf("run %q: the session has no such command", command)
}

func (w *workspace) profiles() []string {
	var ps []string
	for p := range w.files {
		if strings.HasPrefix(p, "profiles/p") && strings.HasSuffix(p, ".md") {
			ps = append(ps, p)
		}
	}
	slices.Sort(ps)
	return ps
}

// profileLines are the header lines every profile must have.
var profileLines = []string{"Role:", "Based in:", "Talk:", "Sources:"}

const maxProfileWords = 450

func (w *workspace) checkProfiles() toolResult {
	ps := w.profiles()
	var b strings.Builder
	fmt.Fprintf(&b, "checking %d profiles in profiles/\n", len(ps))
	bad := 0
	for _, p := range ps {
		c := w.files[p]
		var problems []string
		for _, l := range profileLines {
			if !hasLinePrefix(c, l) {
				problems = append(problems, fmt.Sprintf("missing the '%s' line", l))
			}
		}
		if !hasLinePrefix(c, "> ") {
			problems = append(problems, "no pull quote")
		}
		words := len(strings.Fields(c))
		if words > maxProfileWords {
			problems = append(problems, fmt.Sprintf("%d words, over the limit of %d", words, maxProfileWords))
		}
		if len(problems) == 0 {
			fmt.Fprintf(&b, "%s: ok, %d words\n", p, words)
			continue
		}
		bad++
		for _, pr := range problems {
			fmt.Fprintf(&b, "error: %s: %s\n", p, pr)
		}
	}
	if bad > 0 {
		fmt.Fprintf(&b, "%d of %d profiles have problems\n", bad, len(ps))
		return toolResult{Output: b.String(), ExitCode: 1}
	}
	fmt.Fprintf(&b, "all %d profiles ok\n", len(ps))
	return toolResult{Output: b.String()}
}

func (w *workspace) checkLinks() toolResult {
	ps := w.profiles()
	var b strings.Builder
	fmt.Fprintf(&b, "checking source references in %d profiles\n", len(ps))
	bad := 0
	for _, p := range ps {
		ok := true
		for _, l := range strings.Split(w.files[p], "\n") {
			refs, found := strings.CutPrefix(l, "Sources: ")
			if !found {
				continue
			}
			for _, ref := range strings.Split(refs, ", ") {
				if _, exists := w.files[ref]; !exists {
					fmt.Fprintf(&b, "error: %s: Sources: %s does not exist\n", p, ref)
					ok = false
				}
			}
		}
		if !ok {
			bad++
		}
	}
	if bad > 0 {
		fmt.Fprintf(&b, "%d of %d profiles ok\n", len(ps)-bad, len(ps))
		return toolResult{Output: b.String(), ExitCode: 1}
	}
	fmt.Fprintf(&b, "all references of %d profiles resolve\n", len(ps))
	return toolResult{Output: b.String()}
}

const maxFinalWords = 2500

func (w *workspace) checkFinal() toolResult {
	c, ok := w.files["final.md"]
	if !ok {
		return toolResult{Output: "error: final.md does not exist\n", ExitCode: 1}
	}
	var b strings.Builder
	sections := strings.Split(c, "\n## ")[1:]
	speakerSections, quotes := 0, 0
	var problems []string
	for _, s := range speakers {
		found := false
		for _, sec := range sections {
			if strings.HasPrefix(sec, s.Name+":") {
				found = true
				speakerSections++
				if hasLinePrefix(sec, "> ") {
					quotes++
				} else {
					problems = append(problems, fmt.Sprintf("error: final.md: the section for %s has no pull quote", s.Name))
				}
			}
		}
		if !found {
			problems = append(problems, fmt.Sprintf("error: final.md: no section for %s", s.Name))
		}
	}
	words := len(strings.Fields(c))
	if words > maxFinalWords {
		problems = append(problems, fmt.Sprintf("error: final.md: %d words, over the limit of %d", words, maxFinalWords))
	}
	fmt.Fprintf(&b, "final.md: %d words, %d speaker sections, %d pull quotes\n", words, speakerSections, quotes)
	for _, p := range problems {
		b.WriteString(p + "\n")
	}
	if len(problems) > 0 {
		fmt.Fprintf(&b, "%d problems\n", len(problems))
		return toolResult{Output: b.String(), ExitCode: 1}
	}
	b.WriteString("ok\n")
	return toolResult{Output: b.String()}
}

func hasLinePrefix(text, prefix string) bool {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}
