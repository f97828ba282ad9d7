package web_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/internal/mesh"
	"github.com/ralphmesh/ralph/internal/meshtest/meshconfig"
	"github.com/ralphmesh/ralph/pkg/config"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/prd"
	"github.com/ralphmesh/ralph/pkg/scriptllm"
)

// chromium is Debian's headless browser (scripts/test.sh installs it), or
// "" when it is not here.
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browser starts headless Chromium for the test, or skips it in one line
// where there is none, except in CI (CI=true), where that is a failure.
// It fails the test on any error the page's scripts throw or log (a
// Content-Security-Policy violation among them), and, once setOrigin has
// named the server, on any request to another origin: the console fetches
// nothing from anywhere else.
func browser(t *testing.T) (ctx context.Context, setOrigin func(string)) {
	t.Helper()
	path := chromium()
	if path == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true but chromium is not installed (scripts/test.sh installs Debian's chromium package)")
		}
		t.Skip("skipped: chromium is not installed (apt-get install chromium; scripts/test.sh does it); CI runs this test")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.WindowSize(1600, 1000))
	if os.Geteuid() == 0 {
		// Chromium's own sandbox refuses to run as root.
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelTab := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(cancelTab)
	var mu sync.Mutex
	origin := ""
	listen := func(ev any) {
		// This runs in the tab's message loop: no command here.
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			t.Errorf("the page threw at %s:%d: %s", d.URL, d.LineNumber+1, msg)
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				t.Errorf("the page logged an error: %s", strings.Join(args, " "))
			}
		case *cdplog.EventEntryAdded:
			// A refused call (the wrong token) is logged by the network
			// and is part of the test; anything else is not.
			if ev.Entry.Level == cdplog.EntryLevelError && ev.Entry.Source != cdplog.EntrySourceNetwork {
				t.Errorf("the browser logged an error (%s): %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL)
			}
		case *network.EventRequestWillBeSent:
			mu.Lock()
			o := origin
			mu.Unlock()
			if u, err := url.Parse(ev.Request.URL); err == nil && o != "" && u.Scheme != "data" && u.Scheme+"://"+u.Host != o {
				t.Errorf("the page fetched %s, outside %s", ev.Request.URL, o)
			}
		}
	}
	// The first Run starts the browser; no timeout on it, as it would
	// end the browser.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	if err := chromedp.Listen(ctx, listen); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, cdplog.Enable, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
	// Dark, as a screen on a wall usually is; the page's switch shows the
	// light theme.
	if _, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}},
	}); err != nil {
		t.Fatal(err)
	}
	return ctx, func(o string) {
		mu.Lock()
		origin = o
		mu.Unlock()
	}
}

// do runs browser steps, failing the test on an error.
func do(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

// screenshot saves the whole page as a PNG in the test's artifact
// directory (kept with go test -artifacts; RALPH_TEST_SCREENSHOTS names
// another) and prints where.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dir := os.Getenv("RALPH_TEST_SCREENSHOTS")
	if dir == "" {
		dir = t.ArtifactDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
}

// session is a mesh on the test NATS and Redis with a scripted model.
type session struct {
	t   *testing.T
	cfg config.Config
	m   *mesh.Mesh
}

func newSession(t *testing.T, script string, tune func(*config.Config)) *session {
	t.Helper()
	s, err := scriptllm.ParseScript([]byte(script), ".yaml")
	if err != nil {
		t.Fatal(err)
	}
	srv := scriptllm.New(s)
	base, err := srv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	cfg := meshconfig.New(t)
	cfg.LLM.BaseURL = base
	cfg.Builder.Model, cfg.Critic.Model, cfg.Pruner.Model = "builder", "critic", "pruner"
	cfg.Decomposer.Model, cfg.Summarizer.Model = "decomposer", "summarizer"
	if tune != nil {
		tune(&cfg)
	}
	m, err := mesh.Start(context.Background(), cfg, zap.NewNop(), mesh.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return &session{t: t, cfg: cfg, m: m}
}

// run starts every service but the console until the test ends.
func (s *session) run() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- s.m.RunServices(ctx, "builder", "critic", "stuckdetector", "pruner", "decomposer", "summarizer")
	}()
	s.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			s.t.Errorf("services: %v", err)
		}
	})
}

// start publishes session.started for the PRD in a workspace with files.
func (s *session) start(id, prdYAML string, files map[string]string) {
	s.t.Helper()
	p, err := prd.Parse([]byte(prdYAML), ".yaml")
	if err != nil {
		s.t.Fatal(err)
	}
	ws := s.t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(ws, name), []byte(content), 0o644); err != nil {
			s.t.Fatal(err)
		}
	}
	env, err := events.New(events.SessionStarted, id, "", 0, time.Now(), events.SessionStartedData{PRD: p, Workspace: ws})
	if err != nil {
		s.t.Fatal(err)
	}
	if err := s.m.Bus.Publish(context.Background(), env); err != nil {
		s.t.Fatal(err)
	}
}

// wait follows the session until it ends and returns all its events.
func (s *session) wait(id string) []events.Envelope {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var got []events.Envelope
	err := s.m.Bus.Follow(ctx, id, func(env events.Envelope) (bool, error) {
		got = append(got, env)
		return env.Type.Terminal(), nil
	})
	if err != nil {
		s.t.Fatalf("session %s did not end: %v (%d events)", id, err, len(got))
	}
	if last := got[len(got)-1]; last.Type != events.SessionCompleted {
		s.t.Fatalf("session %s ended with %s, want completed", id, last.Type)
	}
	return got
}

// longSource is a file whose reading fills the context quickly.
func longSource(name string, lines int) string {
	var b strings.Builder
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&b, "%s line %d: the quarterly figures for region %d were reviewed and filed.\n", name, i, i%7)
	}
	return b.String()
}

func decode[T any](t *testing.T, env events.Envelope) T {
	t.Helper()
	var v T
	if err := env.Decode(&v); err != nil {
		t.Fatalf("decode %s: %v", env.Type, err)
	}
	return v
}

// waitFor polls a JavaScript expression in the page until it is true. A
// page that navigates meanwhile (a click on a link) is polled again in
// its new document.
func waitFor(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(time.Until(deadline))))
		if err == nil {
			return
		}
		navigated := false
		for _, s := range []string{"Cannot find context", "context was destroyed", "navigated or closed"} {
			navigated = navigated || strings.Contains(err.Error(), s)
		}
		if !navigated || time.Now().After(deadline) {
			body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText.slice(0, 2000)`))
			t.Fatalf("waiting for %s (%s): %v; the page shows:\n%s", what, expr, err, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// eval runs a JavaScript expression in the page and decodes its value.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}
