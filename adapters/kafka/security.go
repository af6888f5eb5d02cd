package kafka

import (
	"cmp"
	"errors"
	"fmt"
	"strings"

	"github.com/IBM/sarama"
	"github.com/xdg-go/scram"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/adapters/kit/kafkawire"
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
	m, err := kafkawire.ParseMechanism(s)
	if err != nil {
		return "", &ports.ValueError{Field: "kafka.SASL.Mechanism", Reason: err.Error() + " (the producers, franz-go's, authenticate with these three only)"}
	}
	return SASLMechanism(m), nil
}

func (s SASL) validate() error {
	if s.User != "" && s.Mechanism != "" {
		_, err := ParseSASLMechanism(string(s.Mechanism))
		return err
	}
	return kit.FirstBroken("kafka.SASL.", kit.Rule{Broken: s.User == "" && (s.Mechanism != "" || s.Password != ""), Field: "User", Reason: "is required when a SASL mechanism or password is given"})
}

func (c Options) applySecurity(s *sarama.Config) {
	if c.TLS != nil {
		s.Net.TLS.Enable = true
		s.Net.TLS.Config = c.TLS.Clone()
	}
	if c.SASL.User == "" {
		return
	}
	s.Net.SASL.Enable = true // with sarama's default Handshake
	s.Net.SASL.User, s.Net.SASL.Password = c.SASL.User, c.SASL.Password
	m, _ := ParseSASLMechanism(string(c.SASL.Mechanism))
	s.Net.SASL.Mechanism = sarama.SASLMechanism(cmp.Or(m, SASLPlain)) // sarama spells them alike
	if hash := scramHashes[m]; hash != nil {
		s.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: hash} }
	}
}

var scramHashes = map[SASLMechanism]scram.HashGeneratorFcn{SASLSCRAMSHA256: scram.SHA256, SASLSCRAMSHA512: scram.SHA512}

// scramClient is sarama's SCRAM client; Step and Done are xdg-go's.
type scramClient struct {
	hash scram.HashGeneratorFcn
	*scram.ClientConversation
}

func (c *scramClient) Begin(user, password, authzID string) error {
	client, err := c.hash.NewClient(user, password, authzID)
	if err != nil {
		return fmt.Errorf("kafka: SCRAM: the user name or password is not valid SASLprep text")
	}
	c.ClientConversation = client.NewConversation()
	return nil
}

// explainConnect explains a failed connection once preflight passed: a
// TLS listener reached in plaintext, refused SASL credentials (some
// brokers just close the connection), then a TLS failure.
func (c Options) explainConnect(err error) error {
	if c.TLS == nil { // validate required a broker
		if explained := adapters.ExplainPlaintext(c.Brokers[0], "kafka+tls", err); explained != err {
			return explained
		}
	}
	if c.SASL.User != "" && (errors.Is(err, sarama.ErrSASLAuthenticationFailed) || errors.Is(err, sarama.ErrIllegalSASLState) ||
		errors.Is(err, sarama.ErrUnsupportedSASLMechanism) || strings.Contains(err.Error(), "SASL") ||
		adapters.ClosedEarly(err)) {
		m, _ := ParseSASLMechanism(string(c.SASL.Mechanism))
		return fmt.Errorf("%w: kafka: the broker refused SASL %s authentication of user %q: %w; check the user name and password (password_file/password_env), the mechanism (mechanism=plain|scram-sha-256|scram-sha-512) and that the user exists for it", ports.ErrAuth, cmp.Or(m, SASLPlain), c.SASL.User, err)
	}
	if c.TLS != nil {
		return adapters.ExplainTLS(strings.Join(c.Brokers, ","), err)
	}
	return err
}
