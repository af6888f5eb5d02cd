package pulsar_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"

	pulsarclient "github.com/apache/pulsar-client-go/pulsar"

	"github.com/sluicemq/sluice/ports"
)

// clientFaults are switched by the TCK through the harness.
type clientFaults struct {
	sends       atomic.Bool // every publish fails
	deadLetters atomic.Bool // publishes to "<topic>.dlq" fail
}

func (f *clientFaults) failure(topic string) error {
	switch {
	case f.sends.Load():
		return errors.New("injected: publish refused")
	case f.deadLetters.Load() && strings.HasSuffix(topic, ports.DeadLetterSuffix):
		return errors.New("injected: dead-letter publish refused")
	}
	return nil
}

// faultyClient wraps a real client so that publishes can be made to fail
// before they reach the broker (a real broker cannot be told to refuse).
type faultyClient struct {
	pulsarclient.Client
	faults *clientFaults
}

func (c *faultyClient) CreateProducer(opts pulsarclient.ProducerOptions) (pulsarclient.Producer, error) {
	p, err := c.Client.CreateProducer(opts)
	if err != nil {
		return nil, err
	}
	return &faultyProducer{Producer: p, faults: c.faults}, nil
}

type faultyProducer struct {
	pulsarclient.Producer
	faults *clientFaults
}

func (p *faultyProducer) Send(ctx context.Context, m *pulsarclient.ProducerMessage) (pulsarclient.MessageID, error) {
	if err := p.faults.failure(p.Topic()); err != nil {
		return nil, err
	}
	return p.Producer.Send(ctx, m)
}

func (p *faultyProducer) SendAsync(ctx context.Context, m *pulsarclient.ProducerMessage, cb func(pulsarclient.MessageID, *pulsarclient.ProducerMessage, error)) {
	if err := p.faults.failure(p.Topic()); err != nil {
		cb(nil, m, err)
		return
	}
	p.Producer.SendAsync(ctx, m, cb)
}
