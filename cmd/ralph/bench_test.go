package main

import (
	"strings"
	"testing"
)

func TestBenchMeshBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--sessions", "0"}, "--sessions 0: must be between 1 and"},
		{[]string{"--sessions", "ten"}, "--sessions"},
		{[]string{"--steps", "0"}, "--steps 0: must be between 1 and"},
		{[]string{"--timeout", "0s"}, "--timeout 0s: must be positive"},
		{[]string{"--task-steps", "0"}, "--task-steps 0: must be between 1 and 8"},
		{[]string{"--task-steps", "9", "--steps", "36"}, "--task-steps 9: must be between 1 and 8"},
		{[]string{"--task-steps", "3", "--steps", "40"}, "--steps 40: must be a multiple of --task-steps 3"},
		{[]string{"extra"}, "unknown command"},
		{[]string{"--nats-server", "/nonexistent/nats-server"}, "--nats-server /nonexistent/nats-server"},
	} {
		out, code, err := ralph(t, append([]string{"bench", "mesh"}, tc.args...)...)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2:\n%s", tc.args, code, out)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one saying %q", tc.args, err, tc.want)
		}
	}
}
