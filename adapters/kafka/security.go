package kafka

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/xdg-go/scram"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/ports"
)

// SASLMechanism names a SASL mechanism the adapter authenticates with.
type SASLMechanism string

// The SASL mechanisms of Options.SASL.
const (
	// SASLPlain sends the user name and password as they are (RFC 4616):
	// use it only over TLS.
	SASLPlain SASLMechanism = "PLAIN"
	// SASLSCRAMSHA256 proves the password without sending it (RFC 5802,
	// RFC 7677), with SHA-256.
	SASLSCRAMSHA256 SASLMechanism = "SCRAM-SHA-256"
	// SASLSCRAMSHA512 is SCRAM with SHA-512.
	SASLSCRAMSHA512 SASLMechanism = "SCRAM-SHA-512"
)

// SASL is the SASL authentication of Options. The zero value authenticates
// with nothing. The password is never logged nor put in an error.
type SASL struct {
	// Mechanism is SASLPlain, SASLSCRAMSHA256 or SASLSCRAMSHA512. Default
	// (with a User) SASLPlain.
	Mechanism SASLMechanism
	// User and Password are the credentials. User set turns SASL on.
	User, Password string
}

// ParseSASLMechanism reads a mechanism name, case-insensitively: "plain",
// "scram-sha-256", "scram-sha-512".
func ParseSASLMechanism(s string) (SASLMechanism, error) {
	for _, m := range []SASLMechanism{SASLPlain, SASLSCRAMSHA256, SASLSCRAMSHA512} {
		if strings.EqualFold(s, string(m)) {
			return m, nil
		}
	}
	return "", &ports.ValueError{Field: "kafka.SASL.Mechanism", Reason: fmt.Sprintf("%q is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (OAUTHBEARER and GSSAPI: configure sarama with Options.Sarama)", s)}
}

func (s SASL) validate() error {
	if s.User == "" {
		if s.Mechanism != "" || s.Password != "" {
			return &ports.ValueError{Field: "kafka.SASL.User", Reason: "is required when a SASL mechanism or password is given"}
		}
		return nil
	}
	if s.Mechanism != "" {
		if _, err := ParseSASLMechanism(string(s.Mechanism)); err != nil {
			return err
		}
	}
	return nil
}

// apply turns TLS and SASL on in a sarama configuration.
func (c Options) applySecurity(s *sarama.Config) {
	if c.TLS != nil {
		s.Net.TLS.Enable = true
		s.Net.TLS.Config = c.TLS.Clone()
	}
	if c.SASL.User == "" {
		return
	}
	s.Net.SASL.Enable = true
	s.Net.SASL.Handshake = true
	s.Net.SASL.User, s.Net.SASL.Password = c.SASL.User, c.SASL.Password
	switch m, _ := ParseSASLMechanism(string(c.SASL.Mechanism)); m {
	case SASLSCRAMSHA256:
		s.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA256
		s.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: scram.SHA256} }
	case SASLSCRAMSHA512:
		s.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA512
		s.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: scram.SHA512} }
	default:
		s.Net.SASL.Mechanism = sarama.SASLTypePlaintext
	}
}

// scramClient is sarama's SCRAMClient on github.com/xdg-go/scram.
type scramClient struct {
	hash scram.HashGeneratorFcn
	conv *scram.ClientConversation
}

func (c *scramClient) Begin(user, password, authzID string) error {
	client, err := c.hash.NewClient(user, password, authzID)
	if err != nil {
		// SASLprep refused the name or password: say so without either.
		return fmt.Errorf("kafka: SCRAM: the user name or password is not valid SASLprep text")
	}
	c.conv = client.NewConversation()
	return nil
}

func (c *scramClient) Step(challenge string) (string, error) { return c.conv.Step(challenge) }

func (c *scramClient) Done() bool { return c.conv.Done() }

// preflight dials the bootstrap brokers before sarama connects, within the
// dial timeout: when every one refuses the connection it returns that
// error at once (sarama would retry); with TLS it proves the handshake
// with the first broker that answers, since sarama's own handshake waits
// out its read timeout (10s) on a port that does not answer TLS, and its
// errors cannot tell a refused SASL exchange (the broker closes the
// connection) from a failed handshake. nil when a broker answered (and its
// handshake succeeded) or a dial failed otherwise (sarama then reports
// that); else the refusal or an adapters.ErrTLS error saying why.
func (c Options) preflight(timeout time.Duration) error {
	if len(c.Brokers) == 0 {
		return nil
	}
	var refused error
	for _, addr := range c.Brokers {
		conn, err := net.DialTimeout("tcp", addr, timeout)
		if err != nil {
			if !errors.Is(err, syscall.ECONNREFUSED) {
				return nil // sarama reports it
			}
			refused = err
			continue
		}
		defer conn.Close()
		if c.TLS == nil {
			return nil
		}
		_ = conn.SetDeadline(time.Now().Add(timeout))
		conf := c.TLS.Clone()
		if conf.ServerName == "" && !conf.InsecureSkipVerify {
			host, _, _ := net.SplitHostPort(addr)
			conf.ServerName = host
		}
		if err := tls.Client(conn, conf).Handshake(); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return &adapters.TLSError{Addr: addr, Reason: fmt.Sprintf("no answer to the TLS handshake within %v: is this a plaintext port? use the broker's TLS listener, or kafka://", timeout), Err: err}
			}
			return adapters.ExplainTLS(addr, err)
		}
		return nil
	}
	return refused // every bootstrap broker refused the connection: fail at once
}

// explainConnect classifies a failed connection once the TLS handshake
// was proven (preflight) or TLS is off: refused SASL credentials first
// (sarama's ErrSASLAuthenticationFailed, or the broker closing the
// connection during the SASL exchange, as some brokers do instead of
// answering), then the TLS explainer for TLS connections, else err as it
// is.
func (c Options) explainConnect(err error) error {
	if c.TLS == nil && closedEarly(err) && len(c.Brokers) > 0 && speaksTLS(c.Brokers[0], 2*time.Second) {
		return &plaintextOnTLSError{addr: c.Brokers[0], err: err}
	}
	if c.SASL.User != "" && (errors.Is(err, sarama.ErrSASLAuthenticationFailed) || errors.Is(err, sarama.ErrIllegalSASLState) ||
		errors.Is(err, sarama.ErrUnsupportedSASLMechanism) || strings.Contains(err.Error(), "SASL") ||
		closedEarly(err)) {
		m, _ := ParseSASLMechanism(string(c.SASL.Mechanism))
		if m == "" {
			m = SASLPlain
		}
		return fmt.Errorf("%w: kafka: the broker refused SASL %s authentication of user %q: %w; check the user name and password (password_file/password_env), the mechanism (mechanism=plain|scram-sha-256|scram-sha-512) and that the user exists for it", ports.ErrAuth, m, c.SASL.User, err)
	}
	if c.TLS != nil {
		return adapters.ExplainTLS(strings.Join(c.Brokers, ","), err)
	}
	return err
}

// closedEarly reports a connection the broker closed (EOF, reset).
func closedEarly(err error) bool {
	return errors.Is(err, io.EOF) || strings.Contains(err.Error(), "EOF") || strings.Contains(err.Error(), "connection reset")
}

// speaksTLS reports whether addr completes a TLS handshake (without
// verifying anything: only to tell a TLS listener from a plaintext one).
func speaksTLS(addr string, timeout time.Duration) bool {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	return tls.Client(conn, &tls.Config{InsecureSkipVerify: true}).Handshake() == nil //nolint:gosec // detection only, nothing is sent
}

// plaintextOnTLSError: a kafka:// client reached a TLS listener.
type plaintextOnTLSError struct {
	addr string
	err  error
}

func (e *plaintextOnTLSError) Error() string {
	return fmt.Sprintf("the broker at %s is a TLS listener (it closed the plaintext connection and answers a TLS handshake): use kafka+tls:// (%v)", e.addr, e.err)
}

func (e *plaintextOnTLSError) Unwrap() error { return e.err }
