package activemq_test

import (
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/activemq/activemqtest"
	"github.com/sluicemq/sluice/adapters/internal/tlstest"
	"github.com/sluicemq/sluice/ports"
)

// TestTLS starts ActiveMQ with a stomp+ssl connector that requires a
// client certificate signed by the test's CA (needClientAuth) and the
// simpleAuthenticationPlugin with a user, and proves activemq+ssl:// with
// mutual TLS and the user's password from a file: the secure TCK cases
// pass, and each misconfiguration fails Open within the dial timeout,
// saying which, with ports.ErrTLS (on activemq+ssl:// only) or
// ports.ErrAuth. (ActiveMQ has one certificate per broker: the expired
// certificate is proven on the other brokers.)
func TestTLS(t *testing.T) {
	const password, wrong = "s3cret-Pw-for-activemq", "wr0ng-Pw-for-activemq"
	pki := tlstest.New(t)
	const storePass = "sluice-store"
	b := activemqtest.Own(t, activemqtest.Options{
		TLS: &activemqtest.TLSOptions{
			KeyStore: pki.PKCS12(t, "server", pki.ServerCert, pki.ServerKey, storePass), KeyStorePassword: storePass,
			TrustStore: pki.TrustStore(t, storePass), TrustStorePassword: storePass,
			NeedClientAuth: true,
		},
		Users: map[string]string{"svc": password},
	})
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "password"), filepath.Join(dir, "bad-password")
	if err := os.WriteFile(good, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(wrong+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const timeout = 5 * time.Second
	q := func(kv ...string) string {
		v := url.Values{"dial_timeout": {timeout.String()}, "ca_file": {pki.CAFile}, "cert_file": {pki.ClientCert}, "key_file": {pki.ClientKey}}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				v.Del(kv[i])
			} else {
				v.Set(kv[i], kv[i+1])
			}
		}
		return v.Encode()
	}
	tlstest.RunSecureTCK(t, "activemq+ssl://svc@"+b.StompSSLAddr+"?"+q("password_file", good))

	refusedCert := []string{"the broker refused the TLS handshake with the alert", "the broker refused this client's certificate"}
	tlstest.ExpectRefused(t, timeout,
		tlstest.Refusal{Name: "wrong CA", URL: "activemq+ssl://svc@" + b.StompSSLAddr + "?" + q("password_file", good, "ca_file", pki.OtherCAFile),
			Is: ports.ErrTLS, Want: []string{"unknown authority", "ca_file="}, Secrets: []string{password}},
		tlstest.Refusal{Name: "wrong host", URL: "activemq+ssl://svc@" + b.StompSSLAddr + "?" + q("password_file", good, "server_name", "wrong.invalid"),
			Is: ports.ErrTLS, Want: []string{"is for another host", "server_name="}, Secrets: []string{password}},
		tlstest.Refusal{Name: "bad password", URL: "activemq+ssl://svc@" + b.StompSSLAddr + "?" + q("password_file", bad),
			Is: ports.ErrAuth, Want: []string{"ActiveMQ refused the login and passcode"}, Secrets: []string{wrong}},
		tlstest.Refusal{Name: "no client certificate", URL: "activemq+ssl://svc@" + b.StompSSLAddr + "?" + q("password_file", good, "cert_file", "", "key_file", ""),
			Is: ports.ErrTLS, WantAny: refusedCert, Secrets: []string{password}},
		tlstest.Refusal{Name: "client certificate of another CA", URL: "activemq+ssl://svc@" + b.StompSSLAddr + "?" + q("password_file", good, "cert_file", pki.OtherClientCert, "key_file", pki.OtherClientKey),
			Is: ports.ErrTLS, WantAny: refusedCert, Secrets: []string{password}},
		tlstest.Refusal{Name: "expired client certificate", URL: "activemq+ssl://svc@" + b.StompSSLAddr + "?" + q("password_file", good, "cert_file", pki.ExpiredClientCert, "key_file", pki.ExpiredClientKey),
			Is: ports.ErrTLS, WantAny: refusedCert, Secrets: []string{password}},
		tlstest.Refusal{Name: "plaintext client on the TLS port", URL: "activemq://svc:" + password + "@" + b.StompSSLAddr + "?dial_timeout=5s",
			Want: []string{"use activemq+ssl://"}, Secrets: []string{password}},
		// ActiveMQ answers the TLS hello with a STOMP ERROR frame, or
		// waits for the end of a frame that never comes.
		tlstest.Refusal{Name: "TLS client on the plaintext port", URL: "activemq+ssl://svc@" + b.StompAddr + "?" + q("password_file", good),
			Is: ports.ErrTLS, WantAny: []string{"the broker answered in plaintext, not TLS", "gave no TLS answer within 5s: is it a plaintext stomp connector"}, Secrets: []string{password}},
	)
}
