package mqtt

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// Send publishes msgs at QoS 1 and returns after the broker acknowledged
// every one (see ports.Sender). Several messages are published
// concurrently on the sender connection, up to the broker's receive
// maximum. A message with Delay carries HeaderDeliverAt (Send time + Delay,
// rounded up to the millisecond) and is held by the consumer's scheduler.
func (a *Adapter) Send(ctx context.Context, msgs ...ports.Message) error {
	if a.isClosed() {
		return fmt.Errorf("mqtt: send: %w", ports.ErrClosed)
	}
	if len(msgs) == 1 {
		if err := a.sendOne(ctx, &msgs[0]); err != nil {
			return &ports.SendError{Index: 0, Topic: msgs[0].Topic, Err: err}
		}
		return nil
	}
	errs := make([]error, len(msgs))
	var wg sync.WaitGroup
	for i := range msgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.sendOne(ctx, &msgs[i]); err != nil {
				errs[i] = &ports.SendError{Index: i, Topic: msgs[i].Topic, Err: err}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (a *Adapter) sendOne(ctx context.Context, src *ports.Message) error {
	if err := src.Validate(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m := *src
	now := time.Now()
	m.Stamp(now)
	var deliverAt time.Time
	if m.Delay > 0 {
		deliverAt = now.Add(m.Delay + time.Millisecond - 1).Truncate(time.Millisecond)
	}
	p := toPublish(a.physical(m.Topic), &m, deliverAt)
	if err := a.prepare(p, &m); err != nil {
		return err
	}
	return a.publish(ctx, p)
}
