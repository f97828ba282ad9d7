package bus

import (
	"errors"

	"github.com/ralphmesh/ralph/pkg/events"
)

// permanentError marks a failure that no redelivery can fix.
type permanentError struct{ err error }

func (p permanentError) Error() string { return p.err.Error() }
func (p permanentError) Unwrap() error { return p.err }

// Permanent wraps err so the runner terminates the message and dead-letters
// it with the reason instead of redelivering it.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err: err}
}

// IsPermanent reports whether err must not be retried: it was marked with
// Permanent, or it is an invalid event.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p) || errors.Is(err, events.ErrInvalid)
}
