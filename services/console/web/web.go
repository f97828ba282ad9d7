// Package web owns the console as a web page: the list of sessions and a
// live page for each session (its task tree, each step's tool calls, the
// critic's verdicts, stuck signals and what the builder did about them,
// tokens and cost by role, and a chart of the context per iteration with
// every compaction and stuck signal marked on it).
//
// Everything the browser runs is embedded in the binary: plain HTML, CSS
// and JavaScript, no framework and nothing fetched from anywhere else, so
// the console works on a network that reaches nothing but the mesh. The
// pages read the HTTP API (/api/v1, served by the console service beside
// this handler) with the Bearer token a person types in; the browser keeps
// it in localStorage. This handler serves no session data and needs no
// token.
package web

import (
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"

	"github.com/ralphmesh/ralph/pkg/events"
)

//go:embed assets
var embedded embed.FS

// assets is the embedded folder the pages and their scripts are served
// from.
var assets = mustSub(embedded, "assets")

func mustSub(f fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(f, dir)
	if err != nil {
		// The folder is embedded at build time: a missing one is a
		// programming error.
		panic(err)
	}
	return sub
}

// DefaultAPI is where the pages find the HTTP API when no WithAPI option
// says otherwise: the same origin, as the console service serves both.
const DefaultAPI = "/api/v1"

// Option tunes the handler.
type Option func(*options)

type options struct {
	prices Prices
	api    string
}

// WithPrices makes the session page show cost by role next to tokens.
// Roles without a price show tokens only.
func WithPrices(p Prices) Option { return func(o *options) { o.prices = p } }

// WithAPI says where the pages find the HTTP API (a path on the same
// origin, e.g. "/api/v1"), for a handler mounted beside an API that is not
// at DefaultAPI.
func WithAPI(path string) Option { return func(o *options) { o.api = path } }

// contentSecurity keeps the pages to their own origin: scripts and styles
// from the embedded files only (no inline script, so text an event carries
// can never run even if it reached the markup), data from the API on the
// same origin, and nothing framed or posted elsewhere.
const contentSecurity = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the console: the session list at /, a session's page at
// /sessions/{id}, their scripts and styles under /assets/, and
// /console.json, the settings the pages read (where the API is, the
// prices). Every URL a page uses is relative, so the handler can be
// mounted under a prefix with http.StripPrefix.
func Handler(opts ...Option) http.Handler {
	o := options{api: DefaultAPI}
	for _, opt := range opts {
		opt(&o)
	}
	settings, err := json.Marshal(struct {
		API    string `json:"api"`
		Prices Prices `json:"prices"`
	}{o.api, o.prices})
	if err != nil {
		// Prices are numbers and strings: this cannot fail.
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(assets)))
	mux.HandleFunc("GET /{$}", page("index.html"))
	mux.HandleFunc("GET /sessions/{id}", func(w http.ResponseWriter, r *http.Request) {
		if err := events.ValidSession(r.PathValue("id")); err != nil {
			http.Error(w, "no such session: "+err.Error(), http.StatusNotFound)
			return
		}
		page("session.html")(w, r)
	})
	mux.HandleFunc("GET /console.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(settings)
	})
	return secure(mux)
}

// page serves one embedded HTML file.
func page(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, assets, name)
	}
}

// secure sets the headers every response of the console carries. The
// assets are small and change with each build, which embed gives no
// modification time for, so the browser asks again every time instead of
// keeping an old script.
func secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurity)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		next.ServeHTTP(w, r)
	})
}
