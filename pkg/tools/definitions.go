package tools

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	openai "github.com/sashabaranov/go-openai"
	"github.com/sashabaranov/go-openai/jsonschema"
)

// Tool names as the model calls them and as they are recorded (units,
// IterationRecords, journals). Code that looks for a tool by name uses these,
// so that a rename cannot leave a reader behind.
const (
	ReadFile     = "read_file"
	WriteFile    = "write_file"
	EditFile     = "edit_file"
	ListDir      = "list_dir"
	Search       = "search"
	Run          = "run"
	ReadArtifact = "read_artifact"
)

// Mutates reports whether a call of the tool named name can change the
// workspace: run, whose effects are unknown, and the tools that write. A
// step that called none of them leaves the workspace as it found it.
func Mutates(name string) bool {
	return name == Run || name == WriteFile || name == EditFile
}

// param describes one argument of a tool. The same description drives both
// the JSON schema sent to the model and the validation of what comes back,
// so the two cannot drift apart.
type param struct {
	name     string
	typ      jsonschema.DataType
	desc     string
	required bool
}

type toolSpec struct {
	name   string
	desc   string
	params []param
}

func (s toolSpec) param(name string) (param, bool) {
	for _, p := range s.params {
		if p.name == name {
			return p, true
		}
	}
	return param{}, false
}

// usage renders the expected argument object, e.g.
// {"path": string, "offset_line"?: integer}, for error messages that tell
// the model how to retry.
func (s toolSpec) usage() string {
	parts := make([]string, 0, len(s.params))
	for _, p := range s.params {
		opt := "?"
		if p.required {
			opt = ""
		}
		parts = append(parts, `"`+p.name+`"`+opt+": "+string(p.typ))
	}
	return s.name + " expects {" + strings.Join(parts, ", ") + "}"
}

// specs is a function rather than a package variable so that no caller can
// mutate the tool set shared by every executor.
func specs() []toolSpec {
	pathParam := func(desc string, required bool) param {
		return param{name: "path", typ: jsonschema.String, desc: desc, required: required}
	}
	return []toolSpec{
		{
			name: ReadFile,
			desc: "Read a text file from the workspace. Binary files are refused. " +
				"Reads go by lines: offset_line and limit_lines choose a range of whole lines. " +
				"One call returns at most one page of whole lines; a larger file or range comes back one page at a time, " +
				"the page ending with a line that gives the file's size in bytes and lines and the call that reads the next page.",
			params: []param{
				pathParam("File path relative to the workspace root.", true),
				{name: "offset_line", typ: jsonschema.Integer, desc: "First line to return, 1-based. Default 1."},
				{name: "limit_lines", typ: jsonschema.Integer, desc: "Maximum number of lines to return. Default: to the end of the file (a page at a time)."},
			},
		},
		{
			name: WriteFile,
			desc: "Create or overwrite a file in the workspace with the given content. Parent directories are created as needed.",
			params: []param{
				pathParam("File path relative to the workspace root.", true),
				{name: "content", typ: jsonschema.String, desc: "The complete new content of the file.", required: true},
			},
		},
		{
			name: EditFile,
			desc: "Replace an exact string in a file. old must occur exactly once unless replace_all is true; " +
				"include enough surrounding context in old to make it unique.",
			params: []param{
				pathParam("File path relative to the workspace root.", true),
				{name: "old", typ: jsonschema.String, desc: "Exact text to replace, including whitespace and indentation. Must not be empty.", required: true},
				{name: "new", typ: jsonschema.String, desc: "Replacement text.", required: true},
				{name: "replace_all", typ: jsonschema.Boolean, desc: "Replace every occurrence instead of requiring exactly one. Default false."},
			},
		},
		{
			name: ListDir,
			desc: "List a directory in the workspace, one entry per line, sorted; directories end with '/'. The .git directory is not shown.",
			params: []param{
				pathParam(`Directory path relative to the workspace root. Default ".".`, false),
			},
		},
		{
			name: Search,
			desc: "Search file contents in the workspace with a Go (RE2) regular expression. " +
				"Prints matching lines as file:line: text. Skips .git and binary files.",
			params: []param{
				{name: "pattern", typ: jsonschema.String, desc: "Go RE2 regular expression matched against each line.", required: true},
				pathParam(`File or directory to search, relative to the workspace root. Default ".".`, false),
				{name: "max_results", typ: jsonschema.Integer, desc: "Maximum number of matching lines to return. Default 100."},
			},
		},
		{
			name: Run,
			desc: "Run a shell command in the workspace root and return its combined stdout and stderr and exit code. " +
				"Long output is truncated. The command is killed, with everything it started, when it times out. " +
				"Background processes do not survive the call.",
			params: []param{
				{name: "command", typ: jsonschema.String, desc: "Shell command line, run with sh -c.", required: true},
				{name: "timeout_seconds", typ: jsonschema.Number, desc: "Timeout for this command in seconds. Defaults to the configured timeout and is capped at four times it."},
			},
		},
		{
			name: ReadArtifact,
			desc: "Fetch the full stored output of an earlier tool call by artifact id, when a previous result was shortened and named an artifact. " +
				"Like read_file it reads whole lines, one page at a time, with offset_line and limit_lines.",
			params: []param{
				{name: "id", typ: jsonschema.String, desc: "Artifact id.", required: true},
				{name: "offset_line", typ: jsonschema.Integer, desc: "First line to return, 1-based. Default 1."},
				{name: "limit_lines", typ: jsonschema.Integer, desc: "Maximum number of lines to return. Default: to the end (a page at a time)."},
			},
		},
	}
}

func lookupSpec(name string) (toolSpec, bool) {
	for _, s := range specs() {
		if s.name == name {
			return s, true
		}
	}
	return toolSpec{}, false
}

// Definitions returns the tool definitions to offer the model, with a JSON
// schema for each tool's arguments. They go with every request the builder
// makes: each schema is encoded once (json.RawMessage), not at every call.
func Definitions() []openai.Tool { return slices.Clone(definitions()) }

var definitions = sync.OnceValue(func() []openai.Tool {
	ss := specs()
	out := make([]openai.Tool, 0, len(ss))
	for _, s := range ss {
		props := make(map[string]jsonschema.Definition, len(s.params))
		var required []string
		for _, p := range s.params {
			props[p.name] = jsonschema.Definition{Type: p.typ, Description: p.desc}
			if p.required {
				required = append(required, p.name)
			}
		}
		out = append(out, openai.Tool{
			Type: openai.ToolTypeFunction,
			Function: &openai.FunctionDefinition{
				Name:        s.name,
				Description: s.desc,
				Parameters: encodedSchema(jsonschema.Definition{
					Type:                 jsonschema.Object,
					Properties:           props,
					Required:             required,
					AdditionalProperties: false,
				}),
			},
		})
	}
	return out
})

// encodedSchema is d as JSON; a schema of plain values cannot fail to
// encode.
func encodedSchema(d jsonschema.Definition) json.RawMessage {
	b, err := json.Marshal(d)
	if err != nil {
		panic(fmt.Sprintf("tools: encode a tool's schema: %v", err))
	}
	return b
}

// Names returns the tool names in the order Definitions lists them.
func Names() []string {
	ss := specs()
	names := make([]string, len(ss))
	for i, s := range ss {
		names[i] = s.name
	}
	return names
}
