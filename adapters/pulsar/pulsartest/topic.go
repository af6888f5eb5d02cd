package pulsartest

import (
	"errors"
	"fmt"
	"strings"
)

// topic is a persistent, non-partitioned topic: an append-only log of
// entries in one ledger. An entry is what one SEND stored — a single message
// or a whole batch — and its entry id is its index in the log.
type topic struct {
	b         *Broker
	name      string
	ledger    uint64
	entries   []*entry
	producers map[string]*producer // by producer name
	subs      map[string]*subscription
	// nonPersistent: see nonpersistent.go.
	nonPersistent bool
}

// entry is one stored SEND.
type entry struct {
	data []byte // payload section: magic, checksum, metadata, payload
	md   metadata
}

// producer is a producer registered on a connection.
type producer struct {
	c     *conn
	id    uint64
	name  string
	topic *topic
}

// topic returns the topic called name (already normalized), creating it on
// first use as a broker with topic auto-creation does. Caller holds b.mu.
func (b *Broker) topic(name string) *topic {
	if t, ok := b.topics[name]; ok {
		return t
	}
	t := &topic{
		b:             b,
		name:          name,
		nonPersistent: strings.HasPrefix(name, "non-persistent://"),
		ledger:        b.nextLedger,
		producers:     map[string]*producer{},
		subs:          map[string]*subscription{},
	}
	b.nextLedger++
	b.topics[name] = t
	return t
}

// append stores an entry, hands it to every subscription and returns its id.
func (t *topic) append(data []byte, md metadata) messageID {
	id := uint64(len(t.entries))
	t.entries = append(t.entries, &entry{data: data, md: md})
	for _, s := range t.subs {
		s.dispatch()
	}
	if t.nonPersistent {
		t.dropUndelivered(id)
	}
	return messageID{ledger: t.ledger, entry: id, partition: -1, batchIndex: -1}
}

func (t *topic) removeProducer(p *producer) {
	if t.producers[p.name] == p {
		delete(t.producers, p.name)
	}
}

var errInvalidTopic = errors.New("invalid topic name")

// parseTopic validates a topic name and returns its full form
// "persistent://tenant/namespace/topic" (or "non-persistent://..."). Short
// names ("topic", "tenant/namespace/topic") get the defaults a Pulsar
// client applies.
func parseTopic(name string) (string, error) {
	scheme, rest := "persistent", name
	if i := strings.Index(name, "://"); i >= 0 {
		scheme, rest = name[:i], name[i+3:]
	}
	switch scheme {
	case "persistent", "non-persistent":
	default:
		return "", fmt.Errorf("pulsartest: %q: %w: unknown domain %q", name, errInvalidTopic, scheme)
	}
	parts := strings.Split(rest, "/")
	switch len(parts) {
	case 1:
		parts = []string{"public", "default", parts[0]}
	case 3, 4: // tenant/namespace/topic, or the v1 form with a cluster
	default:
		return "", fmt.Errorf("pulsartest: %q: %w", name, errInvalidTopic)
	}
	for _, p := range parts {
		if p == "" {
			return "", fmt.Errorf("pulsartest: %q: %w: empty element", name, errInvalidTopic)
		}
	}
	return scheme + "://" + strings.Join(parts, "/"), nil
}

// topicErrorCode maps a parseTopic error to the server error sent back.
func topicErrorCode(error) serverError { return errInvalidTopicName }
