package bus

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/ralphmesh/ralph/pkg/events"
)

// PanicError is what Recoverer makes of a handler's panic. It carries the
// panicking goroutine's stack because the panic value alone ("index out of
// range") does not say where; the runner logs the stack and puts the head
// of it in the dead letter's Ralph-Stack header.
type PanicError struct {
	Value any
	Stack []byte
}

func (p *PanicError) Error() string { return fmt.Sprintf("handler panicked: %v", p.Value) }

// Unwrap exposes a panic value that is an error (a runtime.Error, say).
func (p *PanicError) Unwrap() error {
	err, _ := p.Value.(error)
	return err
}

// Recoverer turns a panic in h into a permanent *PanicError: the same event
// would panic again on every delivery, so it is dead-lettered at once, and
// the replica lives on to handle the next event.
func Recoverer(h Handler) Handler {
	return func(ctx context.Context, env events.Envelope) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = Permanent(&PanicError{Value: r, Stack: debug.Stack()})
			}
		}()
		return h(ctx, env)
	}
}

// maxStackHeader bounds the Ralph-Stack header: a message's headers count
// against the server's max payload, and the frames near the panic, which
// come first, are the ones that say where it happened.
const maxStackHeader = 8 << 10

// panicOf returns the *PanicError in err's chain, or nil.
func panicOf(err error) *PanicError {
	var p *PanicError
	if errors.As(err, &p) {
		return p
	}
	return nil
}

// stackHeader renders stack for a header value: NATS headers are one line
// (nats.go turns line breaks into spaces), so lines are joined with " | ",
// and the tail beyond maxStackHeader is cut at a line boundary with a note
// of how much was left out.
func stackHeader(stack []byte) string {
	var lines []string
	for _, l := range strings.Split(string(stack), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	const sep = " | "
	var b strings.Builder
	for i, l := range lines {
		need := len(l)
		if b.Len() > 0 {
			need += len(sep)
		}
		// Room is kept for the note unless this is the last line.
		note := fmt.Sprintf("... %d more lines", len(lines)-i)
		reserve := 0
		if i < len(lines)-1 {
			reserve = len(sep) + len(note)
		}
		if b.Len()+need+reserve > maxStackHeader {
			if b.Len() > 0 {
				b.WriteString(sep)
			}
			b.WriteString(note)
			break
		}
		if b.Len() > 0 {
			b.WriteString(sep)
		}
		b.WriteString(l)
	}
	return b.String()
}
