package critic

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/prd"
)

// The changed files the critic is shown: regular files whole, anything
// else named for what it is and never opened for reading. A named pipe
// among them used to hang the review forever, waiting for a writer.
func TestReviewPromptReadsOnlyRegularFiles(t *testing.T) {
	ws := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(ws, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("main.go", "package main\n")
	write("big.txt", strings.Repeat("x", 100))
	if err := syscall.Mkfifo(filepath.Join(ws, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(ws, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(ws, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	s := New(Deps{Config: Config{MaxFileBytes: 50}})
	req := events.CritiqueRequestedData{
		Task:         prd.Task{ID: "T1", Title: "t", AcceptanceCriteria: []string{"a"}},
		Workspace:    ws,
		FilesChanged: []string{"main.go", "pipe", "sock", "dir", "big.txt", "gone.txt", "../outside"},
	}
	done := make(chan string, 1)
	go func() { done <- s.reviewPrompt(context.Background(), req, "", nil) }()
	var prompt string
	select {
	case prompt = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the review prompt hangs: a changed file that is a named pipe was opened for reading")
	}
	for _, want := range []string{
		"--- main.go\npackage main\n",
		"--- pipe (a named pipe, not read)",
		"--- sock (a socket, not read)",
		"--- dir (a directory, not read)",
		"--- big.txt (100 bytes; too large to include whole, so not shown)",
		"--- gone.txt (deleted)",
		"--- ../outside (refused:",
	} {
		if !strings.Contains(prompt, want) {
			t.Errorf("prompt lacks %q:\n%s", want, prompt)
		}
	}
}

func TestReadRegularCapsWhatItReads(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	if data, note := readRegular(p, 10); note != "" || string(data) != "0123456789" {
		t.Fatalf("at the cap: %q, %q", data, note)
	}
	if data, note := readRegular(p, 9); data != nil || note != "10 bytes; too large to include whole, so not shown" {
		t.Fatalf("over the cap: %q, %q", data, note)
	}
	if err := os.Symlink(p, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	// Resolve hands the reader symlink-free paths; a link found there
	// anyway (put in after resolving) is not followed.
	if _, note := readRegular(filepath.Join(dir, "link"), 10); note != "a symbolic link, not read" {
		t.Fatalf("symlink: %q", note)
	}
}
