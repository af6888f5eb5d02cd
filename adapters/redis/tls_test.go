package redis_test

import (
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/internal/tlstest"
	"github.com/sluicemq/sluice/adapters/redis/redistest"
	"github.com/sluicemq/sluice/ports"
)

// TestTLS starts redis-server with a TLS port that requires client
// certificates signed by the test's CA, and an ACL user, and proves
// rediss:// with mutual TLS and the user's password from a file: the
// secure TCK cases pass, and each misconfiguration fails Open within the
// dial timeout, saying which. A second server serves an expired
// certificate.
func TestTLS(t *testing.T) {
	const password, wrong = "s3cret-Pw-for-redis", "wr0ng-Pw-for-redis"
	pki := tlstest.New(t)
	srv := redistest.Own(t, redistest.Options{Durable: true,
		TLS:    &redistest.TLSOptions{CAFile: pki.CAFile, CertFile: pki.ServerCert, KeyFile: pki.ServerKey, RequireClientCertificate: true},
		Config: []string{"user svc on >" + password + " ~* &* +@all"},
	})
	expired := redistest.Own(t, redistest.Options{
		TLS: &redistest.TLSOptions{CAFile: pki.CAFile, CertFile: pki.ExpiredCert, KeyFile: pki.ExpiredKey},
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
	refusedCert := []string{"the broker refused the TLS handshake with the alert", "the broker refused this client's certificate"}
	tlstest.RunSecureTCK(t, "rediss://svc@"+srv.TLSAddr+"/0?"+q("password_file", good))

	tlstest.ExpectRefused(t, timeout,
		tlstest.Refusal{Name: "wrong CA", URL: "rediss://svc@" + srv.TLSAddr + "/0?" + q("password_file", good, "ca_file", pki.OtherCAFile),
			Is: ports.ErrTLS, Want: []string{"unknown authority", "ca_file="}, Secrets: []string{password}},
		tlstest.Refusal{Name: "expired certificate", URL: "rediss://" + expired.TLSAddr + "/0?" + q("durability", "none"),
			Is: ports.ErrTLS, Want: []string{"the broker's certificate has expired"}},
		tlstest.Refusal{Name: "wrong host", URL: "rediss://svc@" + srv.TLSAddr + "/0?" + q("password_file", good, "server_name", "wrong.invalid"),
			Is: ports.ErrTLS, Want: []string{"is for another host", "server_name="}, Secrets: []string{password}},
		tlstest.Refusal{Name: "bad password", URL: "rediss://svc@" + srv.TLSAddr + "/0?" + q("password_file", bad),
			Is: ports.ErrAuth, Want: []string{"Redis refused the user name and password"}, Secrets: []string{wrong}},
		// Redis (OpenSSL) sends its alert and closes: the client sees the
		// alert, or the reset first (it has written its first command).
		tlstest.Refusal{Name: "no client certificate", URL: "rediss://svc@" + srv.TLSAddr + "/0?" + q("password_file", good, "cert_file", "", "key_file", ""),
			Is: ports.ErrTLS, WantAny: refusedCert, Secrets: []string{password}},
		tlstest.Refusal{Name: "client certificate of another CA", URL: "rediss://svc@" + srv.TLSAddr + "/0?" + q("password_file", good, "cert_file", pki.OtherClientCert, "key_file", pki.OtherClientKey),
			Is: ports.ErrTLS, WantAny: refusedCert, Secrets: []string{password}},
		tlstest.Refusal{Name: "expired client certificate", URL: "rediss://svc@" + srv.TLSAddr + "/0?" + q("password_file", good, "cert_file", pki.ExpiredClientCert, "key_file", pki.ExpiredClientKey),
			Is: ports.ErrTLS, WantAny: refusedCert, Secrets: []string{password}},
		// A plaintext URL never gets ports.ErrTLS; the explanation still says why.
		tlstest.Refusal{Name: "plaintext client on the TLS port", URL: "redis://svc:" + password + "@" + srv.TLSAddr + "/0?dial_timeout=5s",
			Is: adapters.ErrTLS, Want: []string{"use rediss://"}, Secrets: []string{password}},
		tlstest.Refusal{Name: "TLS client on the plaintext port", URL: "rediss://svc@" + srv.Addr + "/0?" + q("password_file", good),
			Is: ports.ErrTLS, Want: []string{"gave no TLS answer within the dial timeout", "plaintext port"}, Secrets: []string{password}},
	)
}
