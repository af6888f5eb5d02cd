package kafka

import (
	"context"
	"sync"

	"github.com/IBM/sarama"

	"github.com/sluicemq/sluice/ports"
)

// producer is a confirmed, context-aware front of one sarama AsyncProducer
// (acks=all, idempotent where the protocol allows). Concurrent calls share
// the producer, so their records are batched together.
type producer struct {
	ap sarama.AsyncProducer

	mu     sync.RWMutex // held (read) while writing to ap.Input; Lock to close
	closed bool
	done   chan struct{} // closed when the dispatcher has returned
}

// call collects the confirms of one publish call.
type call struct {
	mu       sync.Mutex
	errs     []error
	finished []bool
	pending  int
	done     chan struct{}
}

// slot is one record's place in a call (the record's Metadata).
type slot struct {
	c *call
	i int
}

func (c *call) finish(i int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.finished[i] {
		return
	}
	c.finished[i] = true
	c.errs[i] = err
	c.pending--
	if c.pending == 0 {
		close(c.done)
	}
}

func newProducer(client sarama.Client) (*producer, error) {
	ap, err := sarama.NewAsyncProducerFromClient(client)
	if err != nil {
		return nil, err
	}
	p := &producer{ap: ap, done: make(chan struct{})}
	go p.dispatch()
	return p, nil
}

// dispatch hands every confirm and failure to its call. It returns when
// the producer has been closed and drained.
func (p *producer) dispatch() {
	defer close(p.done)
	succ, errs := p.ap.Successes(), p.ap.Errors()
	for succ != nil || errs != nil {
		select {
		case m, ok := <-succ:
			if !ok {
				succ = nil
				continue
			}
			s := m.Metadata.(slot)
			s.c.finish(s.i, nil)
		case pe, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			s := pe.Msg.Metadata.(slot)
			s.c.finish(s.i, pe.Err)
		}
	}
}

// publish sends msgs and waits for every confirm. It returns one error per
// message (nil when confirmed). On ctx cancellation the unconfirmed ones
// report ctx.Err(): those not yet handed to the producer are not
// published; those handed over and not confirmed may still be stored by
// the broker. A message whose confirm arrived is never reported.
func (p *producer) publish(ctx context.Context, msgs []*sarama.ProducerMessage) []error {
	c := &call{errs: make([]error, len(msgs)), finished: make([]bool, len(msgs)), pending: len(msgs), done: make(chan struct{})}
	if len(msgs) == 0 {
		return c.errs
	}
	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		for i := range c.errs {
			c.errs[i] = ports.ErrClosed
		}
		return c.errs
	}
	queued := 0
	for i, m := range msgs {
		if ctx.Err() != nil {
			break // not handed to the producer: certainly not published
		}
		m.Metadata = slot{c: c, i: i}
		select {
		case p.ap.Input() <- m:
			queued++
		case <-ctx.Done():
		}
		if queued == i {
			break
		}
	}
	p.mu.RUnlock()
	for i := queued; i < len(msgs); i++ {
		c.finish(i, ctx.Err())
	}
	select {
	case <-c.done:
	case <-ctx.Done():
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]error, len(msgs))
	for i, err := range c.errs {
		if !c.finished[i] {
			err = ctx.Err()
		}
		out[i] = err
	}
	return out
}

// close flushes and closes the producer and waits for the dispatcher.
func (p *producer) close() error {
	p.mu.Lock()
	already := p.closed
	p.closed = true
	p.mu.Unlock()
	if !already {
		p.ap.AsyncClose()
	}
	<-p.done
	return nil
}
