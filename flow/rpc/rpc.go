// Package rpc is typed request/reply over the Port: a Client sends a
// request and waits, with a deadline, for its one reply; Serve is the
// replier's terminal stage, which settles a request only after its reply
// was confirmed by the broker.
//
//	// Requester.
//	c := rpc.NewClient[Prompt, Completion](adapter, "text.complete", rpc.ClientOptions{})
//	if err := c.Start(ctx); err != nil { ... }
//	defer c.Close(ctx)
//	out, err := c.Call(ctx, Prompt{Text: "hello"})
//
//	// Replier.
//	p := flow.New(adapter, ports.SubscriptionSpec{Topic: "text.complete", Group: "completer"})
//	rpc.Serve(p.Source(), adapter, func(ctx context.Context, in Prompt) (Completion, error) { ... })
//	err := p.Run(ctx)
//
// It works on every adapter through the Port alone (no adapter support is
// needed): requests are ordinary messages on the request topic, consumed
// by any LoadBalance group, and replies go to a reply topic of the
// client's own, consumed by the client with a Broadcast subscription of
// its instance (Capabilities.Broadcast is required).
//
// # Headers
//
// A request carries HeaderReplyTo (the topic to answer on), HeaderCorrelation
// (the request's id, copied onto its reply) and HeaderDeadline (when the
// requester stops waiting). A reply carries HeaderCorrelation, and an
// error reply also HeaderError with the error's code; its payload is then
// the JSON of an *Error.
//
// # Guarantees
//
// Requests are at-least-once like every message: a replier that fails
// before its reply was confirmed (a crash, a lost connection, an
// unconfirmed reply) leaves the request unsettled, and the broker
// redelivers it, to the same replier or another. A request can therefore
// be handled more than once (make handlers idempotent, keyed by
// HeaderCorrelation or the message id), and a reply can arrive twice; the
// client hands the first reply of a call to its caller and discards every
// other one — a duplicate, a reply after the caller stopped waiting
// (late), a reply to no call of this client (unknown) — counting each in
// ClientStats. A caller gets exactly one result per Call: the reply, or
// an error.
//
// The reply topic is named by the client (ClientOptions.ReplyTopic), and a
// replier answers on whatever topic a request names: give repliers only
// requests from producers you trust, as with any message that makes a
// service publish.
package rpc

import (
	"encoding/json"
	"fmt"
	"time"
)

// Header names of request/reply. They follow the envelope's rule for
// transport facts (ports: the "sluice-" prefix) and travel like any other
// header on every broker.
const (
	// HeaderReplyTo is the topic a request's reply is sent to: the
	// requesting client's own reply topic.
	HeaderReplyTo = "sluice-reply-to"
	// HeaderCorrelation identifies one request (the request message's id);
	// its reply carries it back, and the client matches the two by it.
	HeaderCorrelation = "sluice-reply-correlation"
	// HeaderDeadline is when the requester stops waiting, in RFC 3339 with
	// nanoseconds (UTC). Serve does not handle a request past it, and
	// hands its handler a context with that deadline. The clocks of
	// requester and replier should agree to well within the timeouts
	// used.
	HeaderDeadline = "sluice-reply-deadline"
	// HeaderError marks an error reply and carries its code (Error.Code);
	// the payload is the JSON of the *Error.
	HeaderError = "sluice-reply-error"
)

// Error is a business error that a replier's handler returns and its
// requester receives from Call (test with errors.As). Serve answers it
// as an error reply and acks the request: the request was handled, its
// answer is the error. Any other handler error requeues the request
// instead (a retryable failure, see Serve).
type Error struct {
	// Code is a short machine-readable reason ("not-found", "invalid");
	// "error" when empty.
	Code string `json:"code"`
	// Message is the human-readable reason.
	Message string `json:"message"`
}

// Errorf returns an *Error with code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string {
	return "rpc: " + e.code() + ": " + e.Message
}

func (e *Error) code() string {
	if e.Code == "" {
		return "error"
	}
	return e.Code
}

// CodeRejected is the code of the error reply Serve sends, when it can,
// for a request it dead-letters as poison (it does not decode, or the
// handler returned a poison error): the requester learns at once that
// no retry will answer it.
const CodeRejected = "rejected"

// NoReplyError is Call's result when no reply arrived before the call's
// deadline or cancellation. It unwraps to the context's error. A reply
// that arrives afterwards is discarded and counted as late.
type NoReplyError struct {
	// ID is the request's correlation id.
	ID string
	// Topic is the request topic.
	Topic string
	// Waited is how long the call waited.
	Waited time.Duration
	Err    error
}

func (e *NoReplyError) Error() string {
	return fmt.Sprintf("rpc: no reply to request %s on %q after %v: %v (a reply arriving later is discarded)", e.ID, e.Topic, e.Waited.Round(time.Millisecond), e.Err)
}

func (e *NoReplyError) Unwrap() error { return e.Err }

func encodeError(e *Error) []byte {
	b, _ := json.Marshal(Error{Code: e.code(), Message: e.Message}) // two strings always encode
	return b
}
