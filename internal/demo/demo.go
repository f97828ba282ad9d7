// Package demo owns what `ralph demo` needs besides the mesh: a three-task
// PRD, a scripted model that works through it (the critic rejects the
// second task once; in the third the builder loops until the stuck detector
// notices and the pruner unsticks it), and a fresh git workspace, on whose
// branch ralph/ralph-mesh-demo the session commits each approved task.
package demo

import (
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/ralphmesh/ralph/pkg/prd"
	"github.com/ralphmesh/ralph/pkg/scriptllm"
)

//go:embed prd.yaml
var prdYAML []byte

//go:embed script.yaml
var scriptYAML []byte

// Models are the model names the demo script answers to.
const (
	BuilderModel = "demo-builder"
	CriticModel  = "demo-critic"
	// PrunerModel answers for the context pruner, which the demo's third
	// task calls on when the builder loops.
	PrunerModel = "demo-pruner"
)

// PRD is the demo's task list.
func PRD() (prd.PRD, error) { return prd.Parse(prdYAML, ".yaml") }

// PRDYAML is the PRD as a file would hold it.
func PRDYAML() []byte { return prdYAML }

// Script is the scripted model's rules.
func Script() (scriptllm.Script, error) { return scriptllm.ParseScript(scriptYAML, ".yaml") }

// changes is the changelog the demo's third task summarises.
const changes = `# Changes
* Startup reads the configuration once instead of three times.
* ralph replay gained a --json flag.
* An empty PRD is refused with a message naming the file.
`

// Workspace makes dir (which must not exist yet) a git repository with a
// README and a changelog, committed: a session needs a clean repository to
// commit to. Without git on the machine the files are there but not
// committed (and `ralph demo` refuses the workspace, saying why).
func Workspace(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("demo workspace: %w", err)
	}
	for name, content := range map[string]string{"README.md": "# demo workspace\n\nCreated by `ralph demo`.\n", "CHANGES.md": changes} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return fmt.Errorf("demo workspace: %w", err)
		}
	}
	if _, err := exec.LookPath("git"); err == nil {
		for _, args := range [][]string{
			{"init", "-q"},
			{"add", "README.md", "CHANGES.md"},
			{"-c", "user.name=ralph", "-c", "user.email=ralph@localhost", "commit", "-q", "-m", "initial commit"},
		} {
			cmd := exec.Command("git", args...)
			cmd.Dir = dir
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("demo workspace: git %v: %v: %s", args, err, out)
			}
		}
	}
	return nil
}
