package bus

// Middleware wraps a Handler with behaviour that is not the handler's own
// business (recovering from panics, keeping the message alive, giving up
// with a failure payload), the way Watermill's HandlerMiddleware does.
type Middleware func(Handler) Handler

// Chain returns h wrapped in m in Watermill's order: the first middleware
// is the outermost, so Chain(h, a, b) runs a, which runs b, which runs h.
func Chain(h Handler, m ...Middleware) Handler {
	for i := len(m) - 1; i >= 0; i-- {
		h = m[i](h)
	}
	return h
}
