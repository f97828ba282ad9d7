package llm

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	openai "github.com/sashabaranov/go-openai"
)

// connCountingServer answers every chat completion and counts the
// connections it is opened.
func connCountingServer(t *testing.T) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var opened atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, completion("m", "ok", 1, 1))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &opened
}

func chatOK(t *testing.T, c *Client) {
	t.Helper()
	_, err := c.Chat(context.Background(), "s", openai.ChatCompletionRequest{
		Messages: []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "hi"}}})
	if err != nil {
		t.Error(err)
	}
}

// Calls one after another go over one connection.
func TestSequentialCallsShareOneConnection(t *testing.T) {
	srv, opened := connCountingServer(t)
	c := newClient(t, Endpoint{BaseURL: srv.URL + "/v1"}, nil)
	for range 20 {
		chatOK(t, c)
	}
	if n := opened.Load(); n != 1 {
		t.Fatalf("20 sequential calls opened %d connections, want 1", n)
	}
}

// A service making Concurrency calls at once, round after round, keeps a
// connection alive for each: the rounds after the first open none, but
// for the odd one dialled while a finished call's connection was on its
// way back to the pool. (With the standard two idle connections per host
// every round opens six.)
func TestConcurrentCallsKeepTheirConnections(t *testing.T) {
	const concurrency, rounds = 8, 5
	srv, opened := connCountingServer(t)
	c := newClient(t, Endpoint{BaseURL: srv.URL + "/v1", Concurrency: concurrency}, nil)
	for range rounds {
		var wg sync.WaitGroup
		for range concurrency {
			wg.Add(1)
			go func() { defer wg.Done(); chatOK(t, c) }()
		}
		wg.Wait()
	}
	if n, most := opened.Load(), int32(concurrency+rounds-1); n > most {
		t.Fatalf("%d rounds of %d calls at once opened %d connections, want at most %d", rounds, concurrency, n, most)
	}
}
