package stuckdetector

import (
	"testing"

	"github.com/ralphmesh/ralph/pkg/events"
)

func TestCallSignature(t *testing.T) {
	tests := []struct {
		name string
		call events.ToolCall
		want string
	}{
		{"no args", events.ToolCall{Name: "list_dir"}, "list_dir"},
		{"null args", call("list_dir", `null`, ""), "list_dir"},
		{"empty object", call("list_dir", ` {} `, ""), "list_dir"},
		{"sorted keys, nested", call("grep", `{"z":1,"a":{"y":true,"b":[2,1]}}`, ""), `grep {"a":{"b":[2,1],"y":true},"z":1}`},
		{"large integers kept", call("seek", `{"offset":12345678901234567890}`, ""), `seek {"offset":12345678901234567890}`},
		{"html not escaped", call("bash", `{"cmd":"a < b && c"}`, ""), `bash {"cmd":"a < b && c"}`},
		{"string-encoded object", call("read_file", `"{\"path\":\"a.go\"}"`, ""), `read_file {"path":"a.go"}`},
		{"plain string", call("bash", `"ls -la"`, ""), `bash "ls -la"`},
		{"not JSON kept as is", call("bash", `ls -la`, ""), `bash ls -la`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := callSignature(tc.call); got != tc.want {
				t.Errorf("callSignature = %s, want %s", got, tc.want)
			}
		})
	}
}
