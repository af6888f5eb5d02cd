package rpc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// ClientOptions configure a Client. Zero fields take the defaults.
type ClientOptions struct {
	// Instance names this client's reply subscription (a Broadcast
	// instance) and, by default, its reply topic. Default: a random id per
	// client. Give a stable per-process name (a host name) on brokers that
	// keep a topic once created (Kafka, Redis streams), so a restarted
	// process reuses its reply topic instead of leaving one behind per run.
	// Two running clients must not share one.
	Instance string
	// ReplyTopic is where replies to this client go. Default
	// "<request topic>.reply.<Instance>", in the request topic's scope.
	// It must be a topic only this client consumes.
	ReplyTopic ports.Topic
	// Timeout bounds a Call whose context has no deadline. Default 30s.
	Timeout time.Duration
	// Remember is how many finished calls the client remembers, to tell a
	// duplicate or late reply from an unknown one. Default 10,000; older
	// calls' replies count as unknown.
	Remember int
	// Flow are options of the reply pipeline (an error handler, a
	// logger).
	Flow []flow.Option
}

// Defaults of ClientOptions.
const (
	DefaultTimeout  = 30 * time.Second
	DefaultRemember = 10_000
)

// ClientStats counts what a client did.
type ClientStats struct {
	Calls     int64 // requests sent (confirmed by the broker)
	Answered  int64 // calls that got their reply
	TimedOut  int64 // calls that ended without a reply (deadline or cancellation, also before the request's publish was confirmed)
	Late      int64 // replies discarded: their call had already ended without one
	Duplicate int64 // replies discarded: their call had already been answered
	Unknown   int64 // replies discarded: no call of this client had that id
}

// Client sends requests of type Req to one topic and waits for replies of
// type Resp on its own reply topic. Build it with NewClient, Start it,
// Call it from any number of goroutines, and Close it.
type Client[Req, Resp any] struct {
	a        ports.Adapter
	requests ports.Topic
	o        ClientOptions

	mu      sync.Mutex
	started bool
	closed  bool
	pending map[string]chan *ports.Delivery
	recent  map[string]bool // id → answered (true) or ended without reply (false)
	order   []string        // recent in insertion order, for the bound
	p       *flow.Pipeline
	done    chan struct{} // closed by Close

	calls, answered, timedOut, late, dup, unknown atomic.Int64
}

// NewClient returns a client of requests on adapter a. Nothing happens
// until Start.
func NewClient[Req, Resp any](a ports.Adapter, requests ports.Topic, o ClientOptions) *Client[Req, Resp] {
	if o.Instance == "" {
		o.Instance = randomID()
	}
	if o.ReplyTopic == "" {
		o.ReplyTopic = requests + ".reply." + ports.Topic(o.Instance)
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Remember <= 0 {
		o.Remember = DefaultRemember
	}
	return &Client[Req, Resp]{
		a: a, requests: requests, o: o,
		pending: make(map[string]chan *ports.Delivery),
		recent:  make(map[string]bool),
		done:    make(chan struct{}),
	}
}

func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ReplyTopic returns the topic replies to this client go to.
func (c *Client[Req, Resp]) ReplyTopic() ports.Topic { return c.o.ReplyTopic }

// Start subscribes the client's reply topic and returns once the
// subscription exists, so replies sent afterwards reach it. It fails with
// ErrInvalid for a bad topic and ErrUnsupported when the adapter has no
// Broadcast.
func (c *Client[Req, Resp]) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return fmt.Errorf("rpc: Start after Close: %w", ports.ErrClosed)
	case c.started:
		return errors.New("rpc: client already started")
	case c.a == nil:
		return &ports.ValueError{Field: "rpc.NewClient adapter", Reason: "is nil"}
	}
	if err := c.requests.Validate(); err != nil {
		return fmt.Errorf("rpc: request topic: %w", err)
	}
	if err := c.o.ReplyTopic.Validate(); err != nil {
		return fmt.Errorf("rpc: reply topic (from ClientOptions.ReplyTopic or Instance): %w", err)
	}
	if !c.a.Capabilities().Broadcast {
		return fmt.Errorf("rpc: %s has no Broadcast subscriptions, which the client's reply topic needs: %w", c.a.Name(), ports.ErrUnsupported)
	}
	spec := ports.SubscriptionSpec{
		Topic: c.o.ReplyTopic, Mode: ports.Broadcast, Group: "rpc", Instance: c.o.Instance,
		DisableDeadLetter: true, // every reply is acked: kept, or discarded and counted
	}
	p := flow.New(c.a, spec, append([]flow.Option{flow.WithDrainTimeout(0)}, c.o.Flow...)...)
	flow.Sink(p.Source(), c.reply, flow.Workers(4))
	if err := p.Start(ctx); err != nil {
		return fmt.Errorf("rpc: subscribing the reply topic: %w", err)
	}
	c.p, c.started = p, true
	return nil
}

// reply hands a reply to its call, or discards and counts it.
func (c *Client[Req, Resp]) reply(_ context.Context, d *ports.Delivery) error {
	id := d.Headers.Get(HeaderCorrelation)
	c.mu.Lock()
	w, ok := c.pending[id]
	if ok {
		delete(c.pending, id)
		c.remember(id, true)
		c.mu.Unlock()
		// Counted before the hand-over: a caller whose Call returned sees
		// its answer in Stats.
		c.answered.Add(1)
		w <- d // buffered 1, and only this reply is sent to it
		return nil
	}
	answered, known := c.recent[id]
	c.mu.Unlock()
	switch {
	case !known:
		c.unknown.Add(1)
	case answered:
		c.dup.Add(1)
	default:
		c.late.Add(1)
	}
	return nil
}

// remember records a finished call; c.mu must be held.
func (c *Client[Req, Resp]) remember(id string, answered bool) {
	if _, ok := c.recent[id]; !ok {
		c.order = append(c.order, id)
	}
	c.recent[id] = answered
	for len(c.order) > c.o.Remember {
		delete(c.recent, c.order[0])
		c.order = c.order[1:]
	}
}

// Call sends req and waits for its reply until ctx is done (or, when ctx
// has no deadline, ClientOptions.Timeout). It returns the decoded reply;
// an *Error for an error reply; a *NoReplyError (unwrapping to the
// context's error) when no reply came in time, also when ctx ended before
// the request's publish was confirmed; the Send error when the broker
// did not confirm the request; ports.ErrClosed after Close. opts set
// further fields of the request message (a key, headers).
func (c *Client[Req, Resp]) Call(ctx context.Context, req Req, opts ...flow.MessageOption) (Resp, error) {
	var zero Resp
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.o.Timeout)
		defer cancel()
	}
	deadline, _ := ctx.Deadline()
	m, err := flow.NewMessage(ctx, c.requests, req, opts...)
	if err != nil {
		return zero, err
	}
	id := ports.NewID()
	m.Headers.Set(ports.HeaderID, id)
	m.Headers.Set(HeaderReplyTo, string(c.o.ReplyTopic))
	m.Headers.Set(HeaderCorrelation, id)
	m.Headers.Set(HeaderDeadline, deadline.UTC().Format(time.RFC3339Nano))

	w := make(chan *ports.Delivery, 1)
	c.mu.Lock()
	switch {
	case c.closed:
		c.mu.Unlock()
		return zero, fmt.Errorf("rpc: Call after Close: %w", ports.ErrClosed)
	case !c.started:
		c.mu.Unlock()
		return zero, errors.New("rpc: Call before Start: start the client first (it subscribes its reply topic)")
	}
	c.pending[id] = w
	c.mu.Unlock()

	start := time.Now()
	if err := c.a.Send(ctx, m); err != nil {
		// It may still have reached the broker: a reply to it is late.
		c.end(id)
		if cerr := ctx.Err(); cerr != nil {
			// The caller stopped waiting before the broker confirmed the
			// request (it may have been delivered all the same).
			c.timedOut.Add(1)
			return zero, &NoReplyError{ID: id, Topic: string(c.requests), Waited: time.Since(start),
				Err: fmt.Errorf("%w (before the request's publish was confirmed: %v)", cerr, err)}
		}
		return zero, fmt.Errorf("rpc: request to %q: %w", string(c.requests), err)
	}
	c.calls.Add(1)
	select {
	case d := <-w:
		return decodeReply[Resp](d)
	case <-ctx.Done():
		if c.end(id) {
			c.timedOut.Add(1)
			return zero, &NoReplyError{ID: id, Topic: string(c.requests), Waited: time.Since(start), Err: ctx.Err()}
		}
		return decodeReply[Resp](<-w) // the reply won the race
	case <-c.done:
		if c.end(id) {
			return zero, fmt.Errorf("rpc: client closed while waiting for a reply to %s: %w", id, ports.ErrClosed)
		}
		return decodeReply[Resp](<-w)
	}
}

// end removes a call that stops waiting; false when its reply was already
// handed over (then it is in the call's channel).
func (c *Client[Req, Resp]) end(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.pending[id]; !ok {
		return false
	}
	delete(c.pending, id)
	c.remember(id, false)
	return true
}

func decodeReply[Resp any](d *ports.Delivery) (Resp, error) {
	var v Resp
	if code, isErr := d.Headers.Lookup(HeaderError); isErr {
		e := &Error{}
		if err := json.Unmarshal(d.Payload, e); err != nil {
			return v, fmt.Errorf("rpc: error reply (code %q) does not decode: %w", code, err)
		}
		if e.Code == "" {
			e.Code = code
		}
		return v, e
	}
	if err := json.Unmarshal(d.Payload, &v); err != nil {
		return v, &ports.DecodeError{Type: reflect.TypeFor[Resp]().String(), Err: err}
	}
	return v, nil
}

// Stats returns a snapshot of the client's counters.
func (c *Client[Req, Resp]) Stats() ClientStats {
	return ClientStats{
		Calls: c.calls.Load(), Answered: c.answered.Load(), TimedOut: c.timedOut.Load(),
		Late: c.late.Load(), Duplicate: c.dup.Load(), Unknown: c.unknown.Load(),
	}
}

// Close ends waiting calls with ports.ErrClosed and stops the reply
// subscription (replies still on their way are redelivered to nobody: on
// most brokers the instance's subscription is removed). It is idempotent.
func (c *Client[Req, Resp]) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.done)
	p := c.p
	c.mu.Unlock()
	if p == nil {
		return nil
	}
	err := p.Stop(ctx)
	var ae *flow.AbandonedError
	if errors.As(err, &ae) {
		return nil // replies in flight to a closing client: nobody waits for them
	}
	return err
}
