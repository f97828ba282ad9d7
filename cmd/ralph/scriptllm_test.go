package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"
)

// scriptllm serve answers chat completions from the script over HTTP and
// stops cleanly when its context ends.
func TestScriptLLMServe(t *testing.T) {
	dir := t.TempDir()
	script := writeFile(t, dir, "model.yaml", `rules:
  - name: greet
    model: m
    when: {last_contains: "hello"}
    reply: {content: "hello from the script"}
`)
	root := newRoot()
	pr, pw := io.Pipe()
	root.SetOut(pw)
	root.SetErr(pw)
	root.SetArgs([]string{"scriptllm", "serve", "--script", script, "--addr", "127.0.0.1:0"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx); pw.Close() }()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		cancel()
		t.Fatalf("no first line: %v (exit: %v)", err, <-done)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	m := regexp.MustCompile(`^scriptllm: 1 rules from .*model\.yaml on (http://127\.0\.0\.1:\d+/v1)\n$`).FindStringSubmatch(line)
	if m == nil {
		cancel()
		t.Fatalf("first line %q does not name the rules, the script and the URL", line)
	}
	cfg := openai.DefaultConfig("")
	cfg.BaseURL = m[1]
	resp, err := openai.NewClientWithConfig(cfg).CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{
		Model:    "m",
		Messages: []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "hello"}},
	})
	if err != nil {
		cancel()
		t.Fatalf("chat completion: %v", err)
	}
	if got := resp.Choices[0].Message.Content; got != "hello from the script" {
		t.Errorf("reply %q, want the script's", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve ended with %v after its context ended, want nil", err)
	}
}

func TestScriptLLMServeBadInput(t *testing.T) {
	dir := t.TempDir()
	good := writeFile(t, dir, "good.yaml", "rules:\n  - reply: {content: ok}\n")
	bad := writeFile(t, dir, "bad.yaml", "rules:\n  - reply: {content: ok}\n    wen: {turn: 1}\n")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no script":     {[]string{"scriptllm", "serve"}, "--script is required"},
		"missing file":  {[]string{"scriptllm", "serve", "--script", filepath.Join(dir, "none.yaml")}, "none.yaml"},
		"unknown field": {[]string{"scriptllm", "serve", "--script", bad}, "wen"},
		"address taken": {[]string{"scriptllm", "serve", "--script", good, "--addr", taken.Addr().String()}, "--addr " + taken.Addr().String()},
	} {
		t.Run(name, func(t *testing.T) {
			_, code, err := ralph(t, tc.args...)
			if code != 2 || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("exit %d, error %v; want exit 2 naming %q", code, err, tc.want)
			}
		})
	}
}
