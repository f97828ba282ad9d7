// Package tools owns the Builder agent's workspace tools: the tool
// definitions offered to the model, the executor that runs one tool call
// against a workspace directory, the confinement rule that keeps every path
// inside that directory, and the workspace fingerprint (Hash) the builder
// compares between iterations, with its stat-cached form (Hasher) that
// re-reads only the files that changed.
//
// It is also the one home of the wording the model sees of tools, which the
// other services import rather than restate: the tool names (ReadFile, Run,
// ...), a result as text (Result.Text, TextFailed), the pointer that stands
// for a text kept elsewhere (ArtifactPointer, FilePointer, pointer.go), and
// the rule for the line that names an error (ErrorLine, errorline.go).
//
// Everything the model sends is untrusted. Bad input (unknown tool, malformed
// arguments, a path that escapes the workspace, an invalid regular
// expression, a missing file) comes back as Result.Error so the model can
// correct itself; Go errors are reserved for failures the model cannot fix.
package tools
