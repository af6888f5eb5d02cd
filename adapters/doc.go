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
//	mqtt://host:1883/ns                 an MQTT 5 broker (mqtts:// with TLS; mqtt+embedded:// for an in-process one)
//	pulsar://host:6650/tenant/ns        Pulsar (pulsar+ssl:// with TLS)
//	activemq://host:61613               ActiveMQ Classic over STOMP 1.2 (activemq+ssl:// with TLS)
//	redis://host:6379/0                 Redis Streams (rediss:// with TLS)
//	rocketmq://host:8081                a RocketMQ 5 proxy over gRPC
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
// one.
//
// # The registry is a value
//
// A [Mux] maps schemes to openers. Adapter packages register on
// [DefaultMux], which [Register], [Schemes] and [Open] use; a program or a
// test that wants a registry of its own makes one with [NewMux] and
// registers on it the openers it wants ([Mux.Opener] returns
// DefaultMux's).
//
// # One adapter at a time
//
// A service has one adapter, chosen by configuration: a second Open on the
// same Mux while the first adapter is still open fails with
// [ErrAlreadyOpen], and closing the adapter frees the slot. [NotExclusive]
// opts out, for tests and for tools that bridge two brokers.
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
// Credentials come from the URL's user info or from [WithCredentials]; the
// password may instead come from a file or an environment variable named
// in the URL, so it appears in no URL, shell history or process list:
//
//	password_file=/run/secrets/mq   the password is the file's content (without its trailing line break)
//	password_env=MQ_PASSWORD        the password is the variable's value
//
// (amqps://svc@host/?password_file=…: the user name stays in the user
// info). A scheme's own secrets (a token) take the same three forms
// (token=…, token_file=…, token_env=…), read with [Params.Secret].
//
// TLS schemes (amqps, mqtts, kafka+tls, pulsar+ssl, activemq+ssl,
// rediss) verify the broker's certificate against the system roots by
// default, with the URL's host as the server name. They take:
//
//	ca_file=/etc/mq/ca.pem          trust these CAs instead of the system roots (WithTLSFiles)
//	cert_file=…&key_file=…          present this client certificate (mutual TLS, SASL EXTERNAL)
//	server_name=mq.internal         verify the certificate for this name instead of the host
//	insecure=true                   do not verify the certificate (WithInsecureTLS; logged as a warning)
//
// or [WithTLS], [WithTLSFiles] and [WithInsecureTLS] in code. Verification
// is never turned off silently: insecure=true, WithInsecureTLS or a
// WithTLS with InsecureSkipVerify is logged as a warning at every Open. A
// plaintext scheme refuses every TLS setting, so that a configuration
// cannot drop TLS by a typo in the scheme. A failed handshake is an error
// wrapping [ErrTLS] that says which check failed ([ExplainTLS]); refused
// credentials wrap [ErrAuth].
//
// Every other query parameter belongs to the scheme; an unknown one is an
// error. Every validation error wraps ports.ErrInvalid and names the
// parameter.
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
// logged, nor do they appear in errors: Open scrubs every secret it knows
// (the password, whatever Params.Secret read, secret-named parameters)
// from the errors it returns, from the errors of the opened adapter's Send
// and Subscribe, and from every line logged through the logger it hands
// the adapter. Payloads are not logged.
package adapters
