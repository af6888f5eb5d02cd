package kafka

import (
	"context"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/kit/kafkawire"
	"github.com/sluicemq/sluice/ports"
)

// kafka:// and kafka+tls:// open the adapter; the parameters are in
// docs/adapters/kafka.md.
func init() {
	kafkawire.Register(adapters.Broker{Scheme: "kafka", TLSScheme: "kafka+tls", Check: func(host string) string {
		return "a Kafka broker listens at " + host + ", that it is reachable from here and advertises an address reachable from here too"
	}}, openKafka)
}

func openKafka(ctx context.Context, k kafkawire.URL, cfg *adapters.Config) (ports.Adapter, error) {
	p := cfg.Params
	kc := Options{Brokers: k.Brokers, Namespace: k.Namespace, Logger: cfg.Logger, TLS: k.TLS,
		NoCreateTopics: !p.Bool("create_topics", true), DisableIdempotence: !p.Bool("idempotent", true),
		SASL: SASL{Mechanism: SASLMechanism(k.Mechanism), User: k.User, Password: k.Password}}
	if err := p.Bind(&kc, "create_topics", "idempotent", "mechanism"); err != nil {
		return nil, err
	}
	return New(ctx, kc)
}
