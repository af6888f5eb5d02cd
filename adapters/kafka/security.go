package kafka

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/xdg-go/scram"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/ports"
)

// SASLMechanism names a SASL mechanism the adapter authenticates with.
type SASLMechanism string

// The SASL mechanisms: PLAIN sends the password as it is (use it only over
// TLS); SCRAM proves it without sending it.
const (
	SASLPlain       SASLMechanism = "PLAIN"
	SASLSCRAMSHA256 SASLMechanism = "SCRAM-SHA-256"
	SASLSCRAMSHA512 SASLMechanism = "SCRAM-SHA-512"
)

// SASL is the SASL authentication of Options; a User turns it on. The
// password is never logged nor put in an error.
type SASL struct {
	Mechanism      SASLMechanism // default SASLPlain
	User, Password string
}

// ParseSASLMechanism reads a mechanism name, case-insensitively.
func ParseSASLMechanism(s string) (SASLMechanism, error) {
	for _, m := range []SASLMechanism{SASLPlain, SASLSCRAMSHA256, SASLSCRAMSHA512} {
		if strings.EqualFold(s, string(m)) {
			return m, nil
		}
	}
	return "", &ports.ValueError{Field: "kafka.SASL.Mechanism", Reason: fmt.Sprintf("%q is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (OAUTHBEARER and GSSAPI: configure sarama with Options.Sarama)", s)}
}

func (s SASL) validate() error {
	if s.User == "" && (s.Mechanism != "" || s.Password != "") {
		return &ports.ValueError{Field: "kafka.SASL.User", Reason: "is required when a SASL mechanism or password is given"}
	}
	if s.User != "" && s.Mechanism != "" {
		_, err := ParseSASLMechanism(string(s.Mechanism))
		return err
	}
	return nil
}

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
	m, _ := ParseSASLMechanism(string(c.SASL.Mechanism))
	s.Net.SASL.Mechanism = sarama.SASLMechanism(cmp.Or(m, SASLPlain)) // sarama spells them alike
	if hash := scramHashes[m]; hash != nil {
		s.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: hash} }
	}
}

var scramHashes = map[SASLMechanism]scram.HashGeneratorFcn{SASLSCRAMSHA256: scram.SHA256, SASLSCRAMSHA512: scram.SHA512}

type scramClient struct {
	hash scram.HashGeneratorFcn
	conv *scram.ClientConversation
}

func (c *scramClient) Begin(user, password, authzID string) error {
	client, err := c.hash.NewClient(user, password, authzID)
	if err != nil {
		return fmt.Errorf("kafka: SCRAM: the user name or password is not valid SASLprep text")
	}
	c.conv = client.NewConversation()
	return nil
}

func (c *scramClient) Step(challenge string) (string, error) { return c.conv.Step(challenge) }

func (c *scramClient) Done() bool { return c.conv.Done() }

// explainConnect explains a failed connection once preflight passed: a
// TLS listener reached in plaintext, refused SASL credentials (some
// brokers just close the connection), then a TLS failure.
func (c Options) explainConnect(err error) error {
	if c.TLS == nil && closedEarly(err) && len(c.Brokers) > 0 && adapters.SpeaksTLS(c.Brokers[0], 2*time.Second) {
		return &plaintextOnTLSError{addr: c.Brokers[0], err: err}
	}
	if c.SASL.User != "" && (errors.Is(err, sarama.ErrSASLAuthenticationFailed) || errors.Is(err, sarama.ErrIllegalSASLState) ||
		errors.Is(err, sarama.ErrUnsupportedSASLMechanism) || strings.Contains(err.Error(), "SASL") ||
		closedEarly(err)) {
		m, _ := ParseSASLMechanism(string(c.SASL.Mechanism))
		return fmt.Errorf("%w: kafka: the broker refused SASL %s authentication of user %q: %w; check the user name and password (password_file/password_env), the mechanism (mechanism=plain|scram-sha-256|scram-sha-512) and that the user exists for it", ports.ErrAuth, cmp.Or(m, SASLPlain), c.SASL.User, err)
	}
	if c.TLS != nil {
		return adapters.ExplainTLS(strings.Join(c.Brokers, ","), err)
	}
	return err
}

func closedEarly(err error) bool {
	return errors.Is(err, io.EOF) || strings.Contains(err.Error(), "EOF") || strings.Contains(err.Error(), "connection reset")
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
