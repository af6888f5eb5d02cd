package ports

import "fmt"

// Topic is a logical topic name such as "orders" or "billing.invoices".
//
// Physical names (an exchange and queue, a Kafka topic, a Pulsar persistent
// topic, an MQTT topic) are private to adapters, which derive them with a
// namespace prefix. A logical name is 1..200 bytes of ASCII letters, digits
// and '.', '-', '_'.
type Topic string

// DeadLetterSuffix is appended to a topic to name its dead-letter topic.
const DeadLetterSuffix = ".dlq"

// DeadLetterTopic returns the logical dead-letter topic of t ("<t>.dlq").
// Adapters without a native dead-letter queue publish poison there; every
// adapter lets a caller subscribe to it like any other topic.
func DeadLetterTopic(t Topic) Topic { return t + DeadLetterSuffix }

// Validate reports whether t is a usable logical topic name.
func (t Topic) Validate() error {
	if len(t) == 0 || len(t) > 200 {
		return fmt.Errorf("%w: topic %q must be 1..200 characters", ErrInvalid, string(t))
	}
	for i, r := range string(t) {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			return fmt.Errorf("%w: topic %q has invalid character %q at byte %d (allowed: ASCII letters, digits, '.', '-', '_')", ErrInvalid, string(t), r, i)
		}
	}
	return nil
}
