package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// Handler answers one request. Its result decides both the reply and the
// request's settlement (see Serve).
type Handler[Req, Resp any] func(ctx context.Context, req Req) (Resp, error)

// ServerStats counts what Serve did with its requests.
type ServerStats struct {
	Replied      int64 // replies confirmed by the broker (the request then acked)
	ErrorReplies int64 // of Replied, error replies (*Error)
	Expired      int64 // requests past their deadline: acked without a reply
	Orphaned     int64 // replies refused with ports.ErrNoSubscriber: the requester is gone; the request was acked
	Rejected     int64 // requests dead-lettered as poison (not a request, undecodable, poison handler error)
	Failed       int64 // requests requeued: a retryable handler error or an unconfirmed reply
}

// Server is the replier Serve attached to a pipeline.
type Server struct {
	replied, errReplies, expired, orphaned, rejected, failed atomic.Int64
}

// Stats returns a snapshot of the server's counters.
func (s *Server) Stats() ServerStats {
	return ServerStats{
		Replied: s.replied.Load(), ErrorReplies: s.errReplies.Load(), Expired: s.expired.Load(),
		Orphaned: s.orphaned.Load(), Rejected: s.rejected.Load(), Failed: s.failed.Load(),
	}
}

// Serve is the replier's terminal stage: it decodes each request (JSON)
// into a Req, calls h, sends the reply to the request's HeaderReplyTo
// topic through replies with confirms, and only then completes the
// request:
//
//   - h returns a value: it is the reply; the request is acked once the
//     broker confirmed the reply;
//   - h returns an *Error (or an error wrapping one): it goes back as an
//     error reply, the caller's Call returns it, and the request is acked
//     once that reply was confirmed;
//   - h returns a poison error (ports.IsPoison), or the request does not
//     decode or lacks the request headers: the request is dead-lettered,
//     after an error reply with code CodeRejected when it names a reply
//     topic (the reply is best effort: the dead letter is what counts);
//   - h returns another error, or the reply is not confirmed: the request
//     is requeued with the pipeline's retry policy (and dead-lettered once
//     its attempts are exhausted), so it is handled again: h must be
//     idempotent;
//   - the request is past its deadline (HeaderDeadline) when it arrives,
//     or h fails because that deadline passed: it is acked without a
//     reply, since the requester stopped waiting;
//   - the reply is refused with ports.ErrNoSubscriber (the requester's
//     reply subscription is gone): the request is acked and counted as
//     orphaned;
//   - the pipeline stops while h runs (a crash is the same): nothing is
//     settled and the broker redelivers the request.
//
// h's context carries the request's deadline and its delivery (request
// id, tenant id, flow.DeliveryFrom), so messages it sends carry the
// request id on. opts are the Sink's (flow.Workers).
func Serve[Req, Resp any](in flow.Stream[*ports.Delivery], replies ports.Sender, h Handler[Req, Resp], opts ...flow.StageOption) *Server {
	s := &Server{}
	reqType := reflect.TypeFor[Req]().String()
	flow.Sink(in, func(ctx context.Context, d *ports.Delivery) error {
		return serveOne(ctx, s, replies, h, reqType, d)
	}, opts...)
	return s
}

func serveOne[Req, Resp any](ctx context.Context, s *Server, replies ports.Sender, h Handler[Req, Resp], reqType string, d *ports.Delivery) error {
	replyTo, corr := ports.Topic(d.Headers.Get(HeaderReplyTo)), d.Headers.Get(HeaderCorrelation)
	if replyTo == "" || corr == "" {
		s.rejected.Add(1)
		return ports.Poisonf("rpc: message %s on %q is not a request: it lacks the %s or %s header", d.ID, string(d.Topic), HeaderReplyTo, HeaderCorrelation)
	}
	if err := replyTo.Validate(); err != nil {
		s.rejected.Add(1)
		return ports.Poisonf("rpc: request %s names a bad reply topic: %v", d.ID, err)
	}
	hctx := ctx
	if v := d.Headers.Get(HeaderDeadline); v != "" {
		deadline, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			s.rejected.Add(1)
			return reject(ctx, s, replies, replyTo, corr, ports.Poisonf("rpc: request %s has a malformed %s %q", d.ID, HeaderDeadline, v))
		}
		if !time.Now().Before(deadline) {
			s.expired.Add(1)
			return nil
		}
		var cancel context.CancelFunc
		hctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	var req Req
	if err := json.Unmarshal(d.Payload, &req); err != nil {
		s.rejected.Add(1)
		return reject(ctx, s, replies, replyTo, corr, &ports.DecodeError{Type: reqType, Err: err})
	}
	resp, herr := h(hctx, req) // a panic is the Sink's: a *ports.PanicError, requeued
	var rerr *Error
	switch {
	case herr == nil:
	case errors.As(herr, &rerr):
	case ctx.Err() != nil:
		return herr // stopping: not settled, redelivered
	case hctx.Err() != nil && errors.Is(herr, hctx.Err()):
		s.expired.Add(1) // the requester stopped waiting
		return nil
	case ports.IsPoison(herr):
		s.rejected.Add(1)
		return reject(ctx, s, replies, replyTo, corr, herr)
	default:
		s.failed.Add(1)
		return herr
	}
	m, err := replyMessage(ctx, replyTo, corr, resp, rerr)
	if err != nil {
		s.rejected.Add(1)
		return ports.Poison(fmt.Errorf("rpc: the handler's reply to %s does not encode: %w", d.ID, err))
	}
	if err := replies.Send(ctx, m); err != nil {
		if errors.Is(err, ports.ErrNoSubscriber) {
			s.orphaned.Add(1)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.failed.Add(1)
		return fmt.Errorf("rpc: reply to request %s not confirmed (the request is requeued): %w", d.ID, err)
	}
	s.replied.Add(1)
	if rerr != nil {
		s.errReplies.Add(1)
	}
	return nil
}

// replyMessage builds the reply (or the error reply when rerr is set).
func replyMessage[Resp any](ctx context.Context, replyTo ports.Topic, corr string, resp Resp, rerr *Error) (ports.Message, error) {
	var (
		m   ports.Message
		err error
	)
	if rerr != nil {
		m, err = flow.NewMessage(ctx, replyTo, struct{}{}, flow.Type("sluice.rpc.error"))
		m.Payload = encodeError(rerr)
		m.Headers.Set(HeaderError, rerr.code())
	} else {
		m, err = flow.NewMessage(ctx, replyTo, resp)
	}
	if err != nil {
		return m, err
	}
	m.Headers.Set(HeaderCorrelation, corr)
	return m, nil
}

// reject tells the requester, best effort, that its request is refused,
// and returns poison so the request is dead-lettered.
func reject(ctx context.Context, s *Server, replies ports.Sender, replyTo ports.Topic, corr string, reason error) error {
	reason = ports.Poison(reason)
	if m, err := replyMessage[struct{}](ctx, replyTo, corr, struct{}{}, &Error{Code: CodeRejected, Message: reason.Error()}); err == nil {
		_ = replies.Send(ctx, m) // best effort: the dead letter is the record
	}
	return reason
}
