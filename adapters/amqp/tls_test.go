package amqp_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/amqp/rabbittest"
	"github.com/sluicemq/sluice/adapters/internal/tlstest"
	"github.com/sluicemq/sluice/ports"
)

// TestTLS starts a RabbitMQ node with a TLS listener (certificates made
// by the test, client certificates verified when given, SASL EXTERNAL
// enabled) and proves amqps:// with PLAIN (the password from a file) and
// with EXTERNAL (the client certificate as the identity): the secure
// TCK cases pass over both, and each misconfiguration fails Open within
// the dial timeout, saying which.
func TestTLS(t *testing.T) {
	pki := tlstest.New(t)
	node := rabbittest.Own(t, rabbittest.Options{TLS: &rabbittest.TLSOptions{
		CAFile: pki.CAFile, CertFile: pki.ServerCert, KeyFile: pki.ServerKey,
		SNI: map[string][2]string{tlstest.ExpiredName: {pki.ExpiredCert, pki.ExpiredKey}},
	}})
	// Each AddUser runs rabbitmqctl twice (add_user, set_permissions), an
	// Erlang VM boot each: beside a CPU hog one took most of a minute.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const password = "s3cret-Pw-for-tls"
	if err := node.AddUser(ctx, "svc", password); err != nil {
		t.Fatal(err)
	}
	// EXTERNAL logs the certificate's common name in; its password is
	// never used.
	if err := node.AddUser(ctx, pki.ClientName, "unused-"+password); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "password")
	badFile := filepath.Join(dir, "bad-password")
	if err := os.WriteFile(pwFile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(badFile, []byte("wr0ng-Pw-for-tls\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tlsHost := fmt.Sprintf("127.0.0.1:%d", node.TLSPort)
	plainHost := fmt.Sprintf("127.0.0.1:%d", node.Port)
	// q builds a query: the dial timeout, then name/value pairs.
	q := func(kv ...string) string {
		v := url.Values{"dial_timeout": {"5s"}}
		for i := 0; i < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v.Encode()
	}
	plainURL := "amqps://svc@" + tlsHost + "/?" + q("password_file", pwFile, "ca_file", pki.CAFile)
	externalURL := "amqps://" + tlsHost + "/?" + q("mechanism", "external", "ca_file", pki.CAFile, "cert_file", pki.ClientCert, "key_file", pki.ClientKey)

	t.Run("PLAIN", func(t *testing.T) { tlstest.RunSecureTCK(t, plainURL) })
	t.Run("EXTERNAL", func(t *testing.T) { tlstest.RunSecureTCK(t, externalURL) })

	nobodyCert, nobodyKey := pki.Client(t, "nobody")
	timeout := 5 * time.Second
	tlstest.ExpectRefused(t, timeout,
		tlstest.Refusal{Name: "wrong CA", URL: "amqps://svc@" + tlsHost + "/?" + q("password_file", pwFile, "ca_file", pki.OtherCAFile),
			Is: adapters.ErrTLS, Want: []string{"unknown authority", "ca_file="}, Secrets: []string{password}},
		tlstest.Refusal{Name: "expired certificate", URL: "amqps://svc@" + tlsHost + "/?" + q("password_file", pwFile, "ca_file", pki.CAFile, "server_name", tlstest.ExpiredName),
			Is: adapters.ErrTLS, Want: []string{"the broker's certificate has expired"}, Secrets: []string{password}},
		tlstest.Refusal{Name: "wrong host", URL: "amqps://svc@" + tlsHost + "/?" + q("password_file", pwFile, "ca_file", pki.CAFile, "server_name", "wrong.invalid"),
			Is: adapters.ErrTLS, Want: []string{"is for another host", "server_name="}, Secrets: []string{password}},
		tlstest.Refusal{Name: "bad password", URL: "amqps://svc@" + tlsHost + "/?" + q("password_file", badFile, "ca_file", pki.CAFile),
			Is: adapters.ErrAuth, Want: []string{"refused the user name and password"}, Secrets: []string{"wr0ng-Pw-for-tls"}},
		tlstest.Refusal{Name: "inline bad password", URL: "amqps://svc:wr0ng-Pw-inline@" + tlsHost + "/?" + q("ca_file", pki.CAFile),
			Is: adapters.ErrAuth, Want: []string{"refused the user name and password"}, Secrets: []string{"wr0ng-Pw-inline"}},
		tlstest.Refusal{Name: "EXTERNAL with an unknown identity", URL: "amqps://" + tlsHost + "/?" + q("mechanism", "external", "ca_file", pki.CAFile, "cert_file", nobodyCert, "key_file", nobodyKey),
			Is: adapters.ErrAuth, Want: []string{"refused the SASL EXTERNAL login", "common name"}},
		// RabbitMQ names the CAs it trusts, so the client sends no
		// certificate of another, and EXTERNAL finds no identity.
		tlstest.Refusal{Name: "EXTERNAL with a certificate of another CA", URL: "amqps://" + tlsHost + "/?" + q("mechanism", "external", "ca_file", pki.CAFile, "cert_file", pki.OtherClientCert, "key_file", pki.OtherClientKey),
			Is: adapters.ErrAuth, Want: []string{"refused the SASL EXTERNAL login"}},
		tlstest.Refusal{Name: "EXTERNAL with an expired certificate", URL: "amqps://" + tlsHost + "/?" + q("mechanism", "external", "ca_file", pki.CAFile, "cert_file", pki.ExpiredClientCert, "key_file", pki.ExpiredClientKey),
			Is: adapters.ErrTLS, WantAny: []string{`the broker refused the TLS handshake with the alert "expired certificate"`, "the broker refused this client's certificate"}},
		tlstest.Refusal{Name: "EXTERNAL without a certificate", URL: "amqps://" + tlsHost + "/?" + q("mechanism", "external", "ca_file", pki.CAFile),
			Is: ports.ErrInvalid, Want: []string{"external needs a client certificate"}},
		tlstest.Refusal{Name: "plaintext client on the TLS port", URL: "amqp://svc:" + password + "@" + tlsHost + "/?" + q(),
			Is: adapters.ErrTLS, Want: []string{"not a plaintext port?", "use amqps://"}, Secrets: []string{password}},
		tlstest.Refusal{Name: "TLS client on the plaintext port", URL: "amqps://svc@" + plainHost + "/?" + q("password_file", pwFile, "ca_file", pki.CAFile),
			Is: adapters.ErrTLS, Want: []string{"answered in plaintext, not TLS"}, Secrets: []string{password}},
	)

	// The expired client certificate again and again: the broker's alert
	// races its reset of the connection with the client's first write, and
	// beside two CPU hogs 15 to 27 in 100 tries once lost the alert
	// behind "use of closed network connection" (docs/reliability.md,
	// failure matrix: TLS refusals). Each try must still say why.
	var again []tlstest.Refusal
	for i := range 20 {
		again = append(again, tlstest.Refusal{Name: fmt.Sprintf("EXTERNAL with an expired certificate, try %d", i+1),
			URL: "amqps://" + tlsHost + "/?" + q("mechanism", "external", "ca_file", pki.CAFile, "cert_file", pki.ExpiredClientCert, "key_file", pki.ExpiredClientKey),
			Is:  adapters.ErrTLS, WantAny: []string{`the broker refused the TLS handshake with the alert "expired certificate"`, "the broker refused this client's certificate"}})
	}
	tlstest.ExpectRefused(t, timeout, again...)
}

// mechanism=external is refused where it cannot work, before dialling.
func TestExternalMechanismIsCheckedAtOpen(t *testing.T) {
	pki := tlstest.New(t)
	for raw, want := range map[string]string{
		"amqp://h:5672/?mechanism=external":                       "it needs amqps://",
		"amqps://u:p@h:5671/?mechanism=external&" + pki.Query():   "give no user name or password",
		"amqps://h:5671/?mechanism=external&" + pki.CAQuery():     "external needs a client certificate",
		"amqps://h:5671/?mechanism=scram&" + pki.CAQuery():        `"scram" is not plain or external`,
		"amqp://h:5672/?password_file=/x":                         "a password needs a user name",
		"amqp://u@h:5672/?password_file=/x&ca_file=" + pki.CAFile: "cannot read the password file",
		"amqp://u:p@h:5672/?ca_file=" + pki.CAFile:                "TLS settings given for the plaintext scheme amqp:// (use amqps://)",
	} {
		_, err := adapters.Open(context.Background(), raw, adapters.NotExclusive())
		if err == nil || !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%s) = %v\nwant an ErrInvalid saying %q", raw, err, want)
		}
	}
}
