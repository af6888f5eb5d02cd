package kafka

import (
	"context"
	"slices"
	"sync"

	"github.com/IBM/sarama"

	"github.com/sluicemq/sluice/ports"
)

// producer is a confirmed, context-aware front of one sarama AsyncProducer
// (acks=all, idempotent where allowed): concurrent calls share it, so their
// records are batched together.
type producer struct {
	ap     sarama.AsyncProducer
	mu     sync.RWMutex // read-held while writing to ap.Input; held to close
	closed bool
	done   chan struct{} // closed when dispatch returned
}

// call collects the confirms of one publish; a slot is a record's
// Metadata.
type call struct {
	mu      sync.Mutex
	errs    []error
	pending []bool
	left    int
	done    chan struct{}
}

type slot struct {
	c *call
	i int
}

func (c *call) finish(i int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.pending[i] {
		return
	}
	c.pending[i], c.errs[i] = false, err
	if c.left--; c.left == 0 {
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

// publish sends msgs and returns one error per message, nil when
// confirmed; when ctx ends first the unconfirmed report ctx.Err().
func (p *producer) publish(ctx context.Context, msgs []*sarama.ProducerMessage) []error {
	if len(msgs) == 0 {
		return nil
	}
	c := &call{errs: make([]error, len(msgs)), pending: make([]bool, len(msgs)), left: len(msgs), done: make(chan struct{})}
	for i := range c.pending {
		c.pending[i] = true
	}
	p.mu.RLock()
	queued := 0
	for i, m := range msgs {
		if p.closed || ctx.Err() != nil {
			break
		}
		m.Metadata = slot{c: c, i: i}
		select {
		case p.ap.Input() <- m:
			queued++
		case <-ctx.Done():
		}
	}
	err := ctx.Err()
	if p.closed {
		err = ports.ErrClosed
	}
	p.mu.RUnlock()
	for i := queued; i < len(msgs); i++ {
		c.finish(i, err)
	}
	select {
	case <-c.done:
	case <-ctx.Done():
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := slices.Clone(c.errs)
	for i := range out {
		if c.pending[i] {
			out[i] = ctx.Err()
		}
	}
	return out
}

func (p *producer) close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		p.ap.AsyncClose()
	}
	p.mu.Unlock()
	<-p.done
}
