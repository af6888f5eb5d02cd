package kafka

import (
	"context"
	"fmt"
	"sync"

	"github.com/IBM/sarama"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// producer is a confirmed, context-aware front of one sarama AsyncProducer
// (acks=all, idempotent where allowed): concurrent calls share it, so their
// records are batched together.
type producer struct {
	ap        sarama.AsyncProducer
	mu        sync.RWMutex // read-held while writing to ap.Input; held to close
	closed    bool
	listeners sync.WaitGroup // read Successes and Errors until the producer closes
}

// confirm is a record's Metadata: it resolves the record's result.
type confirm func(error)

func newProducer(client sarama.Client) (*producer, error) {
	ap, err := sarama.NewAsyncProducerFromClient(client)
	if err != nil {
		return nil, err
	}
	p := &producer{ap: ap}
	p.listeners.Go(func() {
		for m := range ap.Successes() {
			m.Metadata.(confirm)(nil)
		}
	})
	p.listeners.Go(func() {
		for pe := range ap.Errors() {
			pe.Msg.Metadata.(confirm)(fmt.Errorf("%w: %w", ports.ErrUnconfirmed, pe.Err))
		}
	})
	return p, nil
}

// publish sends msgs and returns nil when each was confirmed, else one
// error per message (see kit.Confirms.Wait); a message not handed to
// sarama before ctx ended reports ctx.Err().
func (p *producer) publish(ctx context.Context, msgs []*sarama.ProducerMessage) []error {
	c := kit.NewConfirms(len(msgs))
	p.mu.RLock()
	for i, m := range msgs {
		err := ctx.Err()
		if p.closed {
			err = ports.ErrClosed
		}
		if err == nil {
			m.Metadata = confirm(func(err error) { c.Resolve(i, err) })
			select {
			case p.ap.Input() <- m:
				continue
			case <-ctx.Done():
				err = ctx.Err()
			}
		}
		c.Resolve(i, err)
	}
	p.mu.RUnlock()
	return c.Wait(ctx, 0)
}

// close flushes what was handed over; conn.Close calls it once.
func (p *producer) close() {
	p.mu.Lock()
	p.closed = true
	p.ap.AsyncClose()
	p.mu.Unlock()
	p.listeners.Wait()
}
