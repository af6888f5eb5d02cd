package kafka

import (
	"context"
	"net/url"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/kit/kafkawire"
	"github.com/sluicemq/sluice/ports"
)

// kafka:// and kafka+tls:// open the adapter; the parameters are in
// docs/adapters/kafka.md.
func init() {
	adapters.RegisterBroker(adapters.Broker{Scheme: "kafka", TLSScheme: "kafka+tls", Open: openKafka, Check: func(host string) string {
		return "a Kafka broker listens at " + host + ", that it is reachable from here and advertises an address reachable from here too"
	}})
}

func openKafka(ctx context.Context, u *url.URL, cfg *adapters.Config, _ bool) (ports.Adapter, error) {
	k, err := kafkawire.ParseURL(u, cfg, "kafka+tls")
	if err != nil {
		return nil, err
	}
	p := cfg.Params
	kc := Options{Brokers: k.Brokers, Namespace: k.Namespace, Logger: cfg.Logger, TLS: k.TLS,
		NoCreateTopics: !p.Bool("create_topics", true), DisableIdempotence: !p.Bool("idempotent", true),
		SASL: SASL{Mechanism: SASLMechanism(k.Mechanism), User: k.User, Password: k.Password}}
	if err := p.Bind(&kc, "create_topics", "idempotent", "mechanism"); err != nil {
		return nil, err
	}
	return New(ctx, kc)
}
