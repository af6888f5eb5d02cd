package amqp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"strconv"

	amqp "github.com/rabbitmq/amqp091-go"
)

// When a queue exists with other arguments, RabbitMQ refuses queue.declare
// with PRECONDITION_FAILED (406), closes the channel and names the first
// argument that differs, with the existing value:
//
//	inequivalent arg 'x-queue-type' for queue 'q' in vhost '/':
//	received 'classic' but current is 'quorum'
//	(or: received none but current is the value '1000' of type 'long')
//
// AMQP cannot read a queue's arguments (queue.declare passive returns
// counts only), so explainMismatch learns them from these refusals: it
// declares again with the existing value of each named argument until the
// broker names no more, at most maxProbes times. Every probe either is
// refused (nothing changes) or matches the queue as it exists (a no-op
// declaration), so the queue is never redeclared with other arguments.
const maxProbes = 12

var inequivalent = regexp.MustCompile(`inequivalent arg '(.+?)' for .*?: received (none|the value '.*?' of type '\w+'|'.*?') but current is (none|the value '(.*)' of type '(\w+)'|'(.*)')$`)

// isPrecondition reports whether err is the broker's PRECONDITION_FAILED.
func isPrecondition(err error) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed
}

// argDiff is one argument in which a declaration differs from the queue.
type argDiff struct {
	key  string // "" when the refusal could not be read
	text string // "key: existing X, declared Y"
	cur  string // the existing value ("" for none)
}

// probe finds the arguments in which d differs from the existing queue,
// starting from the refusal first; matched reports that the last probe
// matched the queue, so diffs is complete.
func probe(open func() (*amqp.Channel, error), d queueDecl, first error) (diffs []argDiff, matched bool) {
	args := maps.Clone(d.args)
	if args == nil {
		args = amqp.Table{}
	}
	durable := d.durable
	err := first
	for range maxProbes {
		var ae *amqp.Error
		if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
			return diffs, false
		}
		m := inequivalent.FindStringSubmatch(ae.Reason)
		if m == nil {
			return append(diffs, argDiff{text: ae.Reason}), false
		}
		key, received, current := m[1], m[2], m[3]
		diffs = append(diffs, argDiff{key: key, text: fmt.Sprintf("%s: existing %s, declared %s", key, current, received), cur: m[4] + m[6]})
		if key == "durable" {
			durable = !durable
		} else if !adoptValue(args, key, m) {
			return diffs, false
		}
		ch, oerr := open()
		if oerr != nil {
			return diffs, false
		}
		_, err = ch.QueueDeclare(d.name, durable, false, false, false, args)
		ch.Close()
		if err == nil {
			return diffs, true
		}
	}
	return diffs, false
}

// adoptValue sets args[key] to the existing value in match m (or removes
// it when the queue has none), typed like the declared value; false when
// the value cannot be expressed.
func adoptValue(args amqp.Table, key string, m []string) bool {
	if m[3] == "none" {
		delete(args, key)
		return true
	}
	raw, typ := m[6], ""
	if m[4] != "" || m[5] != "" {
		raw, typ = m[4], m[5]
	}
	switch {
	case typ == "longstr" || typ == "" && isString(args[key]):
		args[key] = raw
	case typ == "bool" || typ == "" && isBool(args[key]):
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return false
		}
		args[key] = b
	default:
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			return false
		}
		args[key] = n
	}
	return true
}

func isString(v any) bool { _, ok := v.(string); return ok }
func isBool(v any) bool   { _, ok := v.(bool); return ok }

// queueType learns the type of the existing queue q (an adopted one) the
// same way: a declaration as a durable quorum queue, refused with the
// existing type or matching it, so nothing is changed. It returns
// "unknown" when the refusals do not say.
func (c *conn) queueType(ctx context.Context, q string) string {
	open := func() (*amqp.Channel, error) { return c.subC.channel(ctx) }
	d := queueDecl{name: q, durable: true, args: amqp.Table{"x-queue-type": string(Quorum)}}
	ch, err := open()
	if err != nil {
		return "unknown"
	}
	_, err = ch.QueueDeclare(q, true, false, false, false, d.args)
	ch.Close()
	if err == nil {
		return string(Quorum)
	}
	diffs, matched := probe(open, d, err)
	for _, x := range diffs {
		if x.key == "x-queue-type" && x.cur == "" {
			return string(Classic) // declared without a type: the default
		} else if x.key == "x-queue-type" {
			return x.cur
		}
	}
	if matched {
		return string(Quorum)
	}
	return "unknown"
}
