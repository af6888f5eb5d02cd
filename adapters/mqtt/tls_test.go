package mqtt_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/internal/opentest"
	"github.com/sluicemq/sluice/adapters/internal/tlstest"
	"github.com/sluicemq/sluice/adapters/mqtt/embedded"
	"github.com/sluicemq/sluice/adapters/mqtt/mqtttest"
	"github.com/sluicemq/sluice/ports"
)

const (
	tlsPassword = "s3cret-Pw-for-mqtt"
	badPassword = "wr0ng-Pw-for-mqtt"
	tlsTimeout  = 5 * time.Second
)

// refusedCert are the two ways a refused client certificate shows: the
// broker's TLS alert, or the reset that may overtake it (the client has
// written its CONNECT by then).
var refusedCert = []string{"the broker refused the TLS handshake with the alert", "the broker refused this client's certificate"}

// query builds a URL query: connect_timeout, then name/value pairs.
func query(kv ...string) string {
	v := url.Values{"connect_timeout": {tlsTimeout.String()}}
	for i := 0; i < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return v.Encode()
}

// passwordFiles writes the right and a wrong password, each in a file.
func passwordFiles(t *testing.T) (good, bad string) {
	t.Helper()
	dir := t.TempDir()
	good, bad = filepath.Join(dir, "password"), filepath.Join(dir, "bad-password")
	if err := os.WriteFile(good, []byte(tlsPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(badPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return good, bad
}

// TestTLSMosquitto starts mosquitto with three TLS listeners made from
// the test's certificates — one checking a password file, one taking the
// client certificate as the identity (use_identity_as_username), one
// serving an expired certificate — and proves mqtts:// on each: the
// secure TCK cases pass, and every misconfiguration fails Open within the
// connect timeout, saying which.
func TestTLSMosquitto(t *testing.T) {
	pki := tlstest.New(t)
	passwd, err := mqtttest.PasswordFile(t.TempDir(), "svc", tlsPassword)
	if err != nil {
		t.Fatal(err)
	}
	m := mqtttest.Require(t, mqtttest.MosquittoOptions{TLS: []mqtttest.TLSListener{
		{CAFile: pki.CAFile, CertFile: pki.ServerCert, KeyFile: pki.ServerKey, PasswordFile: passwd},
		{CAFile: pki.CAFile, CertFile: pki.ServerCert, KeyFile: pki.ServerKey, CertificateIdentity: true},
		{CAFile: pki.CAFile, CertFile: pki.ExpiredCert, KeyFile: pki.ExpiredKey},
	}})
	pwAddr, certAddr, expiredAddr := m.TLSAddr(0), m.TLSAddr(1), m.TLSAddr(2)
	good, bad := passwordFiles(t)

	t.Run("password", func(t *testing.T) {
		tlstest.RunSecureTCK(t, "mqtts://svc@"+pwAddr+"/?"+query("password_file", good, "ca_file", pki.CAFile))
	})
	t.Run("certificate-identity", func(t *testing.T) {
		tlstest.RunSecureTCK(t, "mqtts://"+certAddr+"/?"+query("ca_file", pki.CAFile, "cert_file", pki.ClientCert, "key_file", pki.ClientKey))
	})
	tlstest.ExpectRefused(t, tlsTimeout,
		tlstest.Refusal{Name: "wrong CA", URL: "mqtts://svc@" + pwAddr + "/?" + query("password_file", good, "ca_file", pki.OtherCAFile),
			Is: adapters.ErrTLS, Want: []string{"unknown authority", "ca_file="}, Secrets: []string{tlsPassword}},
		tlstest.Refusal{Name: "expired certificate", URL: "mqtts://" + expiredAddr + "/?" + query("ca_file", pki.CAFile),
			Is: adapters.ErrTLS, Want: []string{"the broker's certificate has expired"}},
		tlstest.Refusal{Name: "wrong host", URL: "mqtts://svc@" + pwAddr + "/?" + query("password_file", good, "ca_file", pki.CAFile, "server_name", "wrong.invalid"),
			Is: adapters.ErrTLS, Want: []string{"is for another host", "server_name="}, Secrets: []string{tlsPassword}},
		tlstest.Refusal{Name: "bad password", URL: "mqtts://svc@" + pwAddr + "/?" + query("password_file", bad, "ca_file", pki.CAFile),
			Is: adapters.ErrAuth, Want: []string{"the broker"}, Secrets: []string{badPassword}},
		tlstest.Refusal{Name: "no credentials", URL: "mqtts://" + pwAddr + "/?" + query("ca_file", pki.CAFile),
			Is: adapters.ErrAuth, Want: []string{"CONNACK reason"}},
		tlstest.Refusal{Name: "no client certificate", URL: "mqtts://" + certAddr + "/?" + query("ca_file", pki.CAFile),
			Is: adapters.ErrTLS, Want: []string{"the broker"}},
		tlstest.Refusal{Name: "client certificate of another CA", URL: "mqtts://" + certAddr + "/?" + query("ca_file", pki.CAFile, "cert_file", pki.OtherClientCert, "key_file", pki.OtherClientKey),
			Is: adapters.ErrTLS, Want: []string{"the broker"}},
		tlstest.Refusal{Name: "expired client certificate", URL: "mqtts://" + certAddr + "/?" + query("ca_file", pki.CAFile, "cert_file", pki.ExpiredClientCert, "key_file", pki.ExpiredClientKey),
			Is: adapters.ErrTLS, WantAny: refusedCert},
		tlstest.Refusal{Name: "plaintext client on the TLS port", URL: "mqtt://svc:" + tlsPassword + "@" + pwAddr + "/?" + query(),
			Want: []string{"not a plaintext port?", "use mqtts://"}, Secrets: []string{tlsPassword}},
		tlstest.Refusal{Name: "TLS client on the plaintext port", URL: "mqtts://" + m.Addr() + "/?" + query("ca_file", pki.CAFile),
			Is: adapters.ErrTLS, Want: []string{"not a TLS port?"}},
	)
}

// TestTLSEmbedded runs the embedded broker with a TLS listener and
// users, and proves mqtts:// against it.
func TestTLSEmbedded(t *testing.T) {
	pki := tlstest.New(t)
	b, err := embedded.Start(embedded.Options{TLS: pki.ServerConfig(t), Users: map[string]string{"svc": tlsPassword}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	if !strings.HasPrefix(b.URL(), "mqtts://") {
		t.Fatalf("URL = %s, want mqtts://", b.URL())
	}
	good, bad := passwordFiles(t)
	t.Run("password", func(t *testing.T) {
		tlstest.RunSecureTCK(t, "mqtts://svc@"+b.Addr()+"/?"+query("password_file", good, "ca_file", pki.CAFile))
	})
	t.Run("password-and-client-certificate", func(t *testing.T) {
		tlstest.RunSecureTCK(t, "mqtts://svc@"+b.Addr()+"/?"+query("password_file", good)+"&"+pki.Query())
	})
	t.Run("insecure", func(t *testing.T) {
		// Without the CA, insecure=true connects, and says so loudly.
		var logs opentest.LogBuffer
		ctx, cancel := context.WithTimeout(context.Background(), 2*tlsTimeout)
		defer cancel()
		a, err := adapters.Open(ctx, "mqtts://svc@"+b.Addr()+"/?"+query("password_file", good, "insecure", "true"),
			adapters.NotExclusive(), adapters.WithLogger(logs.Logger()))
		if err != nil {
			t.Fatalf("Open with insecure=true: %v", err)
		}
		opentest.Close(t, a)
		if !strings.Contains(logs.String(), `"level":"WARN","msg":"sluice: TLS certificate verification is OFF`) {
			t.Errorf("no warning for insecure=true:\n%s", logs.String())
		}
		tlstest.NoSecrets(t, "", &logs, tlsPassword)
	})
	tlstest.ExpectRefused(t, tlsTimeout,
		tlstest.Refusal{Name: "wrong CA", URL: "mqtts://svc@" + b.Addr() + "/?" + query("password_file", good, "ca_file", pki.OtherCAFile),
			Is: adapters.ErrTLS, Want: []string{"unknown authority"}, Secrets: []string{tlsPassword}},
		tlstest.Refusal{Name: "wrong host", URL: "mqtts://svc@" + b.Addr() + "/?" + query("password_file", good, "ca_file", pki.CAFile, "server_name", "wrong.invalid"),
			Is: adapters.ErrTLS, Want: []string{"is for another host"}, Secrets: []string{tlsPassword}},
		tlstest.Refusal{Name: "bad password", URL: "mqtts://svc@" + b.Addr() + "/?" + query("password_file", bad, "ca_file", pki.CAFile),
			Is: adapters.ErrAuth, Want: []string{"the broker refused the user name and password (CONNACK reason 0x86)"}, Secrets: []string{badPassword}},
		tlstest.Refusal{Name: "expired client certificate", URL: "mqtts://svc@" + b.Addr() + "/?" + query("password_file", good, "ca_file", pki.CAFile, "cert_file", pki.ExpiredClientCert, "key_file", pki.ExpiredClientKey),
			Is: adapters.ErrTLS, WantAny: refusedCert, Secrets: []string{tlsPassword}},
		tlstest.Refusal{Name: "plaintext client on the TLS port", URL: "mqtt://svc:" + tlsPassword + "@" + b.Addr() + "/?" + query(),
			Want: []string{"use mqtts://"}, Secrets: []string{tlsPassword}},
	)
}

// The plaintext schemes refuse TLS settings; mqtts needs a host.
func TestTLSSettingsOnMQTTSchemes(t *testing.T) {
	pki := tlstest.New(t)
	for raw, want := range map[string]string{
		"mqtt://h:1883/?" + pki.CAQuery():          "TLS settings given for the plaintext scheme mqtt:// (use mqtts://)",
		"mqtt+embedded:///?insecure=true":          "TLS settings given for the plaintext scheme mqtt+embedded:// (this scheme has no TLS form)",
		"mqtts:///ns?" + pki.CAQuery():             "mqtts:// needs a broker address",
		"mqtts://u@h:8883/?password_env=SLUICE_NO": `the environment variable "SLUICE_NO" (holding the password) is not set`,
	} {
		_, err := adapters.Open(context.Background(), raw, adapters.NotExclusive())
		if err == nil || !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%s) = %v\nwant an ErrInvalid saying %q", raw, err, want)
		}
	}
}
