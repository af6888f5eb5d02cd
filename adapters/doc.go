// Package adapters opens the one broker adapter of a process from a URL,
// in the style of gocloud.dev's URL openers:
//
//	a, err := adapters.Open(ctx, os.Getenv("SLUICE_URL"), adapters.WithLogger(logger))
//	if err != nil { ... }
//	defer a.Close(context.Background())
//
// The URL's scheme selects the adapter:
//
//	mem://                              the embedded in-process broker (the default)
//	amqp://user:pass@host:5672/vhost    RabbitMQ (amqps:// with TLS)
//	kafka://host:9092,host2:9092/ns     Kafka (kafka+tls:// with TLS)
//	mqtt://host:1883/ns                 an MQTT 5 broker (mqtt+embedded:// for an in-process one)
//	pulsar://host:6650/tenant/ns        Pulsar (pulsar+ssl:// with TLS)
//
// Each adapter package registers its own schemes with [Register] when it
// is imported, and this package imports no adapter: a program links only
// the broker clients of the adapters it imports. Import the ones you use,
// or package adapters/all for every scheme of this module:
//
//	import _ "github.com/sluicemq/sluice/adapters/mem" // mem://
//	import _ "github.com/sluicemq/sluice/adapters/all" // every scheme
//
// [Schemes] lists the registered schemes; Open's error for an unknown one
// lists them too. Each scheme's own parameters are documented in its
// package (adapters/<name>/url.go) and listed in the error for an unknown
// one. mqtts:// is refused with ports.ErrUnsupported until the MQTT
// adapter supports TLS.
//
// # One adapter per process
//
// Exactly one adapter is active per process: a second Open while the
// first adapter is still open fails with [ErrAlreadyOpen]. Closing the
// adapter frees the slot. [NotExclusive] opts out, for tests and for tools
// that bridge two brokers.
//
// # Options
//
// Settings shared by every scheme come from query parameters or from
// options, never both for the same setting:
//
//	namespace=svc        prefix isolating this service's topics (WithNamespace)
//	inflight=128         default SubscriptionSpec.InFlight (WithInFlight)
//	max_attempts=5       default RetryPolicy.MaxAttempts (WithRetry)
//	backoff=100ms        default RetryPolicy.Backoff
//	max_backoff=30s      default RetryPolicy.MaxBackoff
//
// Credentials come from the URL's user info or from [WithCredentials], TLS
// settings from [WithTLS] on a TLS scheme. Every other query parameter
// belongs to the scheme; an unknown one is an error. Every validation
// error wraps ports.ErrInvalid and names the parameter.
//
// The in-flight and retry parameters are defaults for every subscription
// made on the adapter: flow.New (and the adapter's Subscribe) fill them
// into the fields a SubscriptionSpec leaves zero, field by field, so a
// field set in code wins. [Spec] returns the resulting spec.
//
// # Logging
//
// Open logs one line at Info level with the caller's logger
// ([WithLogger]): the adapter, the URL without credentials, its
// capabilities and the fallbacks the core applies for what the broker
// lacks (see [Fallbacks]). Without WithLogger only warnings are logged
// (to slog.Default). Credentials and secret query parameters are never
// logged, nor do they appear in errors.
package adapters
