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
	adapters.Register("kafka", adapters.OpenerFunc(openKafka))
	adapters.Register("kafka+tls", adapters.OpenerFunc(openKafka))
}

func openKafka(ctx context.Context, u *url.URL, cfg *adapters.Config) (ports.Adapter, error) {
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
	a, err := New(ctx, kc)
	if err != nil {
		return nil, kafkawire.OpenErr(ctx, err, "a Kafka broker listens at "+u.Host+", that it is reachable from here and advertises an address reachable from here too")
	}
	return a, nil
}
