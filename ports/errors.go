package ports

import (
	"errors"
	"fmt"
)

// Sentinel errors. Test with errors.Is.
var (
	// ErrPoison marks a failure that no retry can fix (a malformed payload,
	// an unknown schema version, a business rule that rejects the message).
	// A poison delivery goes straight to the dead-letter topic.
	ErrPoison = errors.New("poison message")
	// ErrConflict reports a second, different outcome for a completion that
	// already had one. The second outcome is not settled.
	ErrConflict = errors.New("conflicting completion")
	// ErrAlreadyCompleted reports a repeated completion with the same outcome.
	// Nothing is settled twice.
	ErrAlreadyCompleted = errors.New("completion already completed")
	// ErrClosed is returned by operations on a stopped subscription or a
	// closed adapter.
	ErrClosed = errors.New("closed")
	// ErrUnconfirmed is returned when the broker did not confirm a publish
	// (negative confirm, returned as unroutable, or the channel was lost
	// before the confirm arrived). The message may or may not have been
	// stored; retrying may duplicate it.
	ErrUnconfirmed = errors.New("publish not confirmed by the broker")
	// ErrSettleInDoubt is wrapped by a settlement error when the
	// settlement reached the broker but its answer was lost (the
	// connection closed while it waited): the broker may have applied it.
	// The delivery is then either settled or redelivered; the pipeline
	// treats it as unsettled.
	ErrSettleInDoubt = errors.New("settlement in doubt: the broker's answer was lost, it may have been applied")
	// ErrInvalid is wrapped by every validation error.
	ErrInvalid = errors.New("invalid argument")
	// ErrUnsupported is returned when an adapter cannot provide a requested
	// feature and no fallback applies.
	ErrUnsupported = errors.New("not supported by this adapter")
)

// Poison wraps err so that IsPoison reports true. Poison(nil) is nil.
func Poison(err error) error {
	if err == nil {
		return nil
	}
	if IsPoison(err) {
		return err
	}
	return &PoisonError{Err: err}
}

// Poisonf formats a poison error.
func Poisonf(format string, args ...any) error {
	return &PoisonError{Err: fmt.Errorf(format, args...)}
}

// IsPoison reports whether err is classified as poison.
func IsPoison(err error) bool { return errors.Is(err, ErrPoison) }

// PoisonError marks its Err as poison.
type PoisonError struct{ Err error }

func (e *PoisonError) Error() string        { return "poison: " + e.Err.Error() }
func (e *PoisonError) Unwrap() error        { return e.Err }
func (e *PoisonError) Is(target error) bool { return target == ErrPoison }

// DecodeError is returned when a payload cannot be decoded into the
// expected type. It is poison.
type DecodeError struct {
	Type string // the Go type decoded into
	Err  error
}

func (e *DecodeError) Error() string        { return fmt.Sprintf("decode %s: %v", e.Type, e.Err) }
func (e *DecodeError) Unwrap() error        { return e.Err }
func (e *DecodeError) Is(target error) bool { return target == ErrPoison }

// HeaderError reports a malformed envelope header. It is poison.
type HeaderError struct {
	Header, Value string
}

func (e *HeaderError) Error() string        { return fmt.Sprintf("malformed header %s=%q", e.Header, e.Value) }
func (e *HeaderError) Is(target error) bool { return target == ErrPoison || target == ErrInvalid }

// ValueError reports an invalid option or field.
type ValueError struct {
	Field, Reason string
}

func (e *ValueError) Error() string        { return e.Field + " " + e.Reason }
func (e *ValueError) Is(target error) bool { return target == ErrInvalid }

// SendError reports that the message at Index of a Send call was not
// confirmed. Send joins one per failed message; messages not named were
// confirmed.
type SendError struct {
	Index int
	Topic Topic
	Err   error
}

func (e *SendError) Error() string {
	return fmt.Sprintf("send #%d to %q: %v", e.Index, string(e.Topic), e.Err)
}
func (e *SendError) Unwrap() error { return e.Err }

// PanicError is a panic recovered from user code, handed back as an error.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	if err, ok := e.Value.(error); ok {
		return err
	}
	return nil
}
