// Package memorybench owns the memory benchmark behind `ralph memory
// bench`: a session of N tasks on a real in-process mesh where every task
// needs a fact only the first one can find out by exploring — the report
// generator gen.sh fails unless FOO=1 is set, which its error points to
// NOTES.md for — run once with memory off and once with it on, with the
// iterations and tokens of each.
//
// The builder, critic and summarizer models are scripted (pkg/scriptllm),
// and the script answers from what each request holds, as a model would:
// a builder that sees FOO=1 anywhere in its first context runs the
// generator with it at once; one that does not runs it plainly, reads the
// notes the error points to, and runs it again with FOO=1. So the only
// difference between the runs is whether the fact reaches a later task's
// first context, which is what memory is for. The summarizer's answer is
// scripted the same way: it names the fix only when the digest it is
// given shows it.
package memorybench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/ralphmesh/ralph/pkg/prd"
	"github.com/ralphmesh/ralph/pkg/scriptllm"
)

// The model names the script answers to.
const (
	BuilderModel    = "bench-builder"
	CriticModel     = "bench-critic"
	SummarizerModel = "bench-summarizer"
)

// genScript is the report generator: it refuses to run without FOO=1 and
// says where to read why.
const genScript = `#!/bin/sh
# gen.sh N writes report N to out/N.txt.
if [ "$FOO" != "1" ]; then
  echo "error: FOO is not set; see NOTES.md" >&2
  exit 1
fi
mkdir -p out
echo "report $1" > "out/$1.txt"
echo "generated out/$1.txt"
`

// notes are the project's notes, as long as such notes are: the line that
// matters is one of many, and a builder that does not know reads them all.
const notes = `# Notes for contributors

## Layout
- gen.sh is the report generator; it writes out/N.txt for report N.
- out/ holds the generated reports; it is created on the first run.
- Reports are plain text, one line each, and are checked by the reviewer.

## Conventions
- Shell scripts are POSIX sh; no bashisms.
- Every script starts with a comment saying what it does.
- Keep reports in out/, one file per report, named after its number.
- Do not edit generated files by hand: run the generator again.
- Commit messages start with the task id.

## Running things
- The report generator reads FOO from its environment: run it as FOO=1 sh gen.sh N.
- Without FOO it refuses to run, so that a half-configured machine writes nothing.
- The reviewer checks a report with grep on its one line.

## History
- The generator once wrote all reports into one file; that was split up.
- FOO used to default to 1; it was made explicit after a release wrote empty reports.
- The out/ directory used to be committed; it is generated now.

## Contacts
- Questions about the generator go to the reports channel.
- Changes to the conventions above need a second reviewer.
`

// Workspace makes dir (which must not exist yet) the scenario's workspace:
// gen.sh and NOTES.md, committed to a git repository when git is on the
// machine.
func Workspace(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("memory benchmark workspace: %w", err)
	}
	for name, content := range map[string]string{"gen.sh": genScript, "NOTES.md": notes} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return fmt.Errorf("memory benchmark workspace: %w", err)
		}
	}
	if _, err := exec.LookPath("git"); err != nil {
		return nil
	}
	for _, args := range [][]string{
		{"init", "-q"},
		{"add", "gen.sh", "NOTES.md"},
		{"-c", "user.name=ralph", "-c", "user.email=ralph@localhost", "commit", "-q", "-m", "initial commit"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("memory benchmark workspace: git %v: %v: %s", args, err, out)
		}
	}
	return nil
}

// PRD is n tasks, T1..Tn, each generating its report after the one before.
// Nothing in them mentions FOO.
func PRD(n int) prd.PRD {
	p := prd.PRD{Title: "Reports"}
	for k := 1; k <= n; k++ {
		t := prd.Task{
			ID: taskID(k), Title: fmt.Sprintf("Report %d", k),
			Description:        fmt.Sprintf("Generate report %d with the report generator, gen.sh.", k),
			AcceptanceCriteria: []string{fmt.Sprintf("out/%d.txt holds report %d", k, k)},
			Verify:             fmt.Sprintf("grep -qx 'report %d' out/%d.txt", k, k),
		}
		if k > 1 {
			t.DependsOn = []string{taskID(k - 1)}
		}
		p.Tasks = append(p.Tasks, t)
	}
	return p
}

func taskID(k int) string { return fmt.Sprintf("T%d", k) }

// Script is the scripted builder, critic and summarizer for n tasks.
func Script(n int) scriptllm.Script {
	var rules []scriptllm.Rule
	run := func(cmd string) []scriptllm.ToolCall {
		return []scriptllm.ToolCall{{Name: "run", Arguments: map[string]any{"command": cmd}}}
	}
	for k := 1; k <= n; k++ {
		task := "Task " + taskID(k) + ":"
		fixed := fmt.Sprintf("FOO=1 sh gen.sh %d", k)
		rules = append(rules,
			scriptllm.Rule{Name: fmt.Sprintf("done-%d", k), Model: BuilderModel,
				When:  scriptllm.Match{FirstUserContains: task, LastRole: "tool", LastContains: fmt.Sprintf("generated out/%d.txt", k)},
				Reply: &scriptllm.Reply{Content: fmt.Sprintf("Report %d is in out/%d.txt: I ran `%s`.", k, k, fixed)}},
			scriptllm.Rule{Name: fmt.Sprintf("fix-%d", k), Model: BuilderModel,
				When:  scriptllm.Match{FirstUserContains: task, LastRole: "tool", LastContains: "run it as FOO=1"},
				Reply: &scriptllm.Reply{Content: "The notes say gen.sh needs FOO=1; running it so.", ToolCalls: run(fixed)}},
			scriptllm.Rule{Name: fmt.Sprintf("notes-%d", k), Model: BuilderModel,
				When: scriptllm.Match{FirstUserContains: task, LastRole: "tool", LastContains: "FOO is not set"},
				Reply: &scriptllm.Reply{Content: "The generator points to NOTES.md.",
					ToolCalls: []scriptllm.ToolCall{{Name: "read_file", Arguments: map[string]any{"path": "NOTES.md"}}}}},
			// A model that finds the fact in its first context uses it.
			scriptllm.Rule{Name: fmt.Sprintf("recall-%d", k), Model: BuilderModel,
				When:  scriptllm.Match{FirstUserContains: task, Turn: 1, AnyContains: "FOO=1"},
				Reply: &scriptllm.Reply{Content: "The session's memory says gen.sh needs FOO=1.", ToolCalls: run(fixed)}},
			scriptllm.Rule{Name: fmt.Sprintf("try-%d", k), Model: BuilderModel,
				When:  scriptllm.Match{FirstUserContains: task, Turn: 1},
				Reply: &scriptllm.Reply{Content: "Running the generator.", ToolCalls: run(fmt.Sprintf("sh gen.sh %d", k))}},
		)
		// The summarizer names the fix only when the digest shows it: the
		// failure and the run that worked (the task found it out), or the
		// run that worked alone (it knew it already).
		extract := scriptllm.Match{SystemContains: "digest of a task it has just finished", FirstUserContains: task}
		found, knew := extract, extract
		found.AnyContains = "FOO is not set"
		knew.AnyContains = "`" + fixed + "` -> ok"
		decision := fmt.Sprintf("## Key Decisions\n- report %d is written by gen.sh to out/%d.txt, one file per report\n", k, k)
		rules = append(rules,
			scriptllm.Rule{Name: fmt.Sprintf("extract-found-%d", k), Model: SummarizerModel, When: found, Reply: &scriptllm.Reply{Content: decision +
				fmt.Sprintf("## Errors & Solutions\n- `sh gen.sh %d` failed: FOO is not set; NOTES.md says to run it as `FOO=1 sh gen.sh N`\n", k) +
				"## Critical Context\n- gen.sh needs FOO=1 in its environment: `FOO=1 sh gen.sh N`"}},
			scriptllm.Rule{Name: fmt.Sprintf("extract-knew-%d", k), Model: SummarizerModel, When: knew, Reply: &scriptllm.Reply{Content: decision +
				"## Critical Context\n- gen.sh needs FOO=1 in its environment: `FOO=1 sh gen.sh N`"}},
		)
	}
	rules = append(rules,
		scriptllm.Rule{Name: "extract-other", Model: SummarizerModel, When: scriptllm.Match{SystemContains: "digest of a task it has just finished"},
			Reply: &scriptllm.Reply{Content: "## Key Decisions\n- nothing a later task needs"}},
		scriptllm.Rule{Name: "merge", Model: SummarizerModel, When: scriptllm.Match{SystemContains: "outgrown its bound"},
			Reply: &scriptllm.Reply{Content: "## Key Decisions\n- [T1] gen.sh writes report N to out/N.txt, one file per report\n" +
				"## Critical Context\n- [T1] gen.sh needs FOO=1 in its environment: `FOO=1 sh gen.sh N`"}},
		scriptllm.Rule{Name: "approve", Model: CriticModel,
			Reply: &scriptllm.Reply{Content: `{"approved": true, "feedback": "The report is there.", "unmet_criteria": []}`}},
	)
	return scriptllm.Script{Rules: rules}
}
