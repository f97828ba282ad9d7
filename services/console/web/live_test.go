package web_test

import (
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"
)

const liveScript = `
rules:
  - {model: builder, when: {turn: 1}, reply: {content: "Looking at the workspace.", tool_calls: [{name: list_dir, arguments: {path: "."}}]}}
  - {model: builder, when: {turn: 2}, reply: {content: "Writing hello.txt.", tool_calls: [{name: write_file, arguments: {path: hello.txt, content: "hello\n"}}]}}
  - {model: builder, reply: {content: "hello.txt says hello."}}
  - {model: critic, reply: {content: '{"approved": true, "feedback": "ok"}'}}
`

// TestLiveSessionPage opens the page of a session that has only started
// (no service is running yet), then starts the services: the iterations,
// the verdict and the end arrive on the open page, without a reload.
func TestLiveSessionPage(t *testing.T) {
	ctx, setOrigin := browser(t)
	s := newSession(t, liveScript, nil)
	const id = "web-live"
	s.start(id, `
tasks:
  - {id: H1, title: Say hello, acceptance_criteria: [hello.txt says hello]}
`, nil)
	base, token := consoleServer(t, s.m)
	setOrigin(base)
	do(t, ctx,
		chromedp.Navigate(base+"/"),
		chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`localStorage.setItem("ralph.console.token", %q)`, token)),
		chromedp.Navigate(base+"/sessions/"+id),
	)
	waitFor(t, ctx, "the started session", `document.body.dataset.events === "1" && document.body.dataset.state === "running" && document.getElementById("status").dataset.status === "live"`)
	if n := eval[int](t, ctx, `document.querySelectorAll('#chart [data-kind="point"]').length`); n != 0 {
		t.Fatalf("%d chart points before any iteration", n)
	}
	screenshot(t, ctx, "live-started.png")
	// A mark on this page: a reload would lose it.
	do(t, ctx, chromedp.Evaluate[chromedp.Void](`window.testMark = "still here"`))

	s.run()
	got := s.wait(id)
	waitFor(t, ctx, "the live events", fmt.Sprintf(`document.body.dataset.events === "%d" && document.body.dataset.state === "completed"`, len(got)))
	if mark := eval[string](t, ctx, `window.testMark || ""`); mark != "still here" {
		t.Fatal("the page was reloaded; the events should have arrived on the open page")
	}
	points, _, _ := expected(t, got)
	gotPoints := eval[[]chartPoint](t, ctx, `Array.from(document.querySelectorAll('#chart [data-kind="point"]')).map(e => ({iteration: +e.dataset.iteration, tokens: +e.dataset.tokens}))`)
	if len(points) != 3 || fmt.Sprint(gotPoints) != fmt.Sprint(points) {
		t.Fatalf("chart points %v, want %v (three iterations)", gotPoints, points)
	}
	if v := eval[string](t, ctx, `document.querySelector('#activity .entry.approved').innerText`); v == "" {
		t.Fatal("the critic's approval is not shown")
	}
	// When the session ends the page asks for the summary again: the
	// critic's usage is in no event.
	usage, err := s.m.Store.Usage(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the final usage by role", fmt.Sprintf(`(document.querySelector('#usage tr[data-role="critic"]') || {dataset: {}}).dataset.calls === "%d" && document.querySelector('#usage tr[data-role="builder"]').dataset.calls === "%d"`,
		usage["critic:calls"], usage["builder:calls"]))
	screenshot(t, ctx, "live.png")
}

// TestPageResumesADroppedStream: a server (a proxy's timeout) that ends
// the event stream every four events. The page asks again from the last
// event it has and shows every event once.
func TestPageResumesADroppedStream(t *testing.T) {
	ctx, setOrigin := browser(t)
	s := newSession(t, liveScript, nil)
	const id = "web-dropped"
	s.start(id, `
tasks:
  - {id: H1, title: Say hello, acceptance_criteria: [hello.txt says hello]}
`, nil)
	s.run()
	got := s.wait(id)
	base, token, api := fakeServer(t, s.m, 4)
	setOrigin(base)
	do(t, ctx,
		chromedp.Navigate(base+"/"),
		chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`localStorage.setItem("ralph.console.token", %q)`, token)),
		chromedp.Navigate(base+"/sessions/"+id),
	)
	waitFor(t, ctx, "every event", fmt.Sprintf(`document.body.dataset.events === "%d" && document.body.dataset.state === "completed"`, len(got)))
	if n := api.streamsAsked(); n < len(got)/4 {
		t.Fatalf("%d streams asked for %d events ended every 4: the page did not reconnect", n, len(got))
	}
	// Each event once: one entry per iteration, one end.
	points, _, _ := expected(t, got)
	if n := eval[int](t, ctx, `document.querySelectorAll('#activity .entry[data-kind="iteration"]').length`); n != len(points) {
		t.Fatalf("%d iteration entries, want %d", n, len(points))
	}
	if n := eval[int](t, ctx, `document.querySelectorAll('#chart [data-kind="point"]').length`); n != len(points) {
		t.Fatalf("%d chart points, want %d", n, len(points))
	}
	if n := eval[int](t, ctx, `document.querySelectorAll('#activity .entry[data-kind="end"]').length`); n != 1 {
		t.Fatalf("%d session ends shown, want 1", n)
	}
}
