package main

import (
	"context"
	"encoding/json"
	"fmt"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// The billing service as it was, written against amqp091-go by hand. Its
// names are the ones the migration must keep byte for byte: other
// services publish to this exchange with this routing key, and operators
// watch these queues.
const (
	legacyExchange   = "dc3.e.billing"              // topic exchange of the billing domain
	legacyKey        = "dc3.r.billing.invoices"     // dc3.r.<domain>.<service>
	legacyQueue      = "dc3.q.billing.mailer"       // the mailer's queue
	legacyDeadKey    = "dc3.r.billing.invoices.dlq" // where the mailer parks what it cannot mail
	legacyDeadQueue  = "dc3.q.billing.mailer.dlq"   // ... and the queue operators read it from
	legacyQueueTTLMs = int64(24 * 60 * 60 * 1000)   // invoices older than a day are stale
)

// legacyArgs are the mailer queue's arguments as the old deploy declared
// them.
func legacyArgs() amqp091.Table {
	return amqp091.Table{"x-queue-type": "quorum", "x-message-ttl": legacyQueueTTLMs}
}

// declareLegacy is the old program's topology set-up, unchanged. After the
// migration it is run by the old deploy tooling only (or not at all):
// sluice adopts what it created.
func declareLegacy(url string) error {
	conn, err := amqp091.Dial(url)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.ExchangeDeclare(legacyExchange, "topic", true, false, false, false, nil); err != nil {
		return err
	}
	for _, q := range []struct {
		name, key string
		args      amqp091.Table
	}{{legacyQueue, legacyKey, legacyArgs()}, {legacyDeadQueue, legacyDeadKey, amqp091.Table{"x-queue-type": "quorum"}}} {
		if _, err := ch.QueueDeclare(q.name, true, false, false, false, q.args); err != nil {
			return err
		}
		if err := ch.QueueBind(q.name, q.key, legacyExchange, false, nil); err != nil {
			return err
		}
	}
	return nil
}

// legacyPublish is how the other services still publish an invoice: a
// plain JSON body to the billing exchange, with a publisher confirm.
func legacyPublish(ctx context.Context, url string, inv Invoice) error {
	conn, err := amqp091.Dial(url)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.Confirm(false); err != nil {
		return err
	}
	body, err := json.Marshal(inv)
	if err != nil {
		return err
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, legacyExchange, legacyKey, true, false, amqp091.Publishing{
		ContentType: "application/json", DeliveryMode: amqp091.Persistent, MessageId: inv.ID, Body: body,
	})
	if err != nil {
		return err
	}
	if ok, err := dc.WaitContext(ctx); err != nil || !ok {
		return fmt.Errorf("legacy publish of %s not confirmed: %v", inv.ID, err)
	}
	return nil
}

// legacyDeadLetters takes what is parked in the dead-letter queue, the way
// operators read it, and returns each body with its sluice-dlq-reason.
func legacyDeadLetters(url string) ([]string, error) {
	conn, err := amqp091.Dial(url)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	var out []string
	for {
		d, ok, err := ch.Get(legacyDeadQueue, true)
		if err != nil {
			return nil, err
		}
		if !ok {
			return out, nil
		}
		out = append(out, fmt.Sprintf("%s reason=%q", d.Body, d.Headers["sluice-dlq-reason"]))
	}
}
