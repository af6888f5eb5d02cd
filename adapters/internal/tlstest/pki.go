// Package tlstest makes a throwaway public-key infrastructure for the TLS
// tests of the adapters: a CA, certificates for a broker on 127.0.0.1 and
// for clients, and the bad ones each failure case needs (expired, for
// another host, signed by another CA). Everything is generated when a test
// asks for it, in its t.TempDir(); nothing is committed, and no key
// outlives the test.
//
// It also holds the checks every adapter's TLS test makes the same way
// ([ExpectRefused]), so that each adapter's test only starts its broker
// and names its URLs.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// PKI is a throwaway CA with the certificates of one test, as PEM files
// in Dir. Every field holding a file name is an absolute path.
type PKI struct {
	// Dir is the test's temporary directory holding the files.
	Dir string

	// CAFile is the trusted CA: it signs every certificate below but
	// those of the other CA.
	CAFile string
	// ServerCert and ServerKey: the broker's certificate, valid for
	// 127.0.0.1, ::1 and localhost.
	ServerCert, ServerKey string
	// ClientCert and ClientKey: a client certificate with the common
	// name ClientName, signed by the CA.
	ClientCert, ClientKey string
	// ClientName is the common name of ClientCert ("sluice-client"), the
	// identity a broker derives from it.
	ClientName string

	// ExpiredCert and ExpiredKey: a broker certificate for 127.0.0.1,
	// localhost and ExpiredName that expired a day ago.
	ExpiredCert, ExpiredKey string
	// WrongHostCert and WrongHostKey: a valid broker certificate for
	// another host (wrong.invalid) only.
	WrongHostCert, WrongHostKey string
	// ExpiredClientCert and ExpiredClientKey: a client certificate
	// (common name ClientName) that expired a day ago.
	ExpiredClientCert, ExpiredClientKey string

	// OtherCAFile is another CA, trusted by nobody: a client given it
	// does not trust the broker.
	OtherCAFile string
	// OtherClientCert and OtherClientKey: a client certificate (common
	// name ClientName) signed by the other CA, which the broker does not
	// trust.
	OtherClientCert, OtherClientKey string

	ca, otherCA *issuer
}

type issuer struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// ExpiredName is a server name the expired certificate is valid for: a
// broker that serves certificates by server name (SNI) can serve it for
// that name beside its good one.
const ExpiredName = "expired.localhost"

// New makes the PKI in t.TempDir(). It fails the test on any error.
func New(t testing.TB) *PKI {
	t.Helper()
	p := &PKI{Dir: t.TempDir(), ClientName: "sluice-client"}
	now := time.Now()
	p.ca = newCA(t, "sluice test CA")
	p.otherCA = newCA(t, "sluice other CA")
	p.CAFile = p.writeCert(t, "ca.pem", p.ca.cert)
	p.OtherCAFile = p.writeCert(t, "other-ca.pem", p.otherCA.cert)

	local := leaf{dns: []string{"localhost"}, ips: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}}
	p.ServerCert, p.ServerKey = p.issue(t, "server", p.ca, leaf{cn: "localhost", dns: local.dns, ips: local.ips, server: true})
	p.ExpiredCert, p.ExpiredKey = p.issue(t, "expired", p.ca, leaf{cn: "localhost", dns: []string{"localhost", ExpiredName}, ips: local.ips, server: true,
		notBefore: now.Add(-72 * time.Hour), notAfter: now.Add(-24 * time.Hour)})
	p.WrongHostCert, p.WrongHostKey = p.issue(t, "wrong-host", p.ca, leaf{cn: "wrong.invalid", dns: []string{"wrong.invalid"}, server: true})
	p.ClientCert, p.ClientKey = p.issue(t, "client", p.ca, leaf{cn: p.ClientName})
	p.ExpiredClientCert, p.ExpiredClientKey = p.issue(t, "expired-client", p.ca, leaf{cn: p.ClientName,
		notBefore: now.Add(-72 * time.Hour), notAfter: now.Add(-24 * time.Hour)})
	p.OtherClientCert, p.OtherClientKey = p.issue(t, "other-client", p.otherCA, leaf{cn: p.ClientName})
	return p
}

// Client issues another client certificate, signed by the CA, with the
// common name cn (a broker's identity for it), and returns its files.
func (p *PKI) Client(t testing.TB, cn string) (certFile, keyFile string) {
	t.Helper()
	return p.issue(t, "client-"+cn, p.ca, leaf{cn: cn})
}

// Query returns the URL query parameters that make a client trust the CA
// and present the client certificate: "ca_file=…&cert_file=…&key_file=…".
func (p *PKI) Query() string {
	return url.Values{"ca_file": {p.CAFile}, "cert_file": {p.ClientCert}, "key_file": {p.ClientKey}}.Encode()
}

// CAQuery returns "ca_file=…": trust the CA, present no certificate.
func (p *PKI) CAQuery() string { return url.Values{"ca_file": {p.CAFile}}.Encode() }

// ServerConfig returns a TLS configuration for an in-process broker: the
// server certificate, and the CA as the authority of client certificates,
// verified when given (tls.VerifyClientCertIfGiven).
func (p *PKI) ServerConfig(t testing.TB) *tls.Config {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(p.ServerCert, p.ServerKey)
	if err != nil {
		t.Fatalf("tlstest: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(p.ca.cert)
	return &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12}
}

// PKCS12 writes certFile, keyFile and the CA into a PKCS#12 key store
// protected by password (for a Java broker's keyStore) and returns its
// path. It runs openssl, and skips the test when openssl is missing
// (failing instead when CI is set).
func (p *PKI) PKCS12(t testing.TB, name, certFile, keyFile, password string) string {
	t.Helper()
	out := filepath.Join(p.Dir, name+".p12")
	openssl := lookTool(t, "openssl")
	cmd := exec.Command(openssl, "pkcs12", "-export", "-in", certFile, "-inkey", keyFile, "-certfile", p.CAFile,
		"-name", name, "-out", out, "-passout", "pass:"+password)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tlstest: openssl pkcs12 -export: %v: %s", err, b)
	}
	return out
}

// TrustStore writes the CA into a PKCS#12 trust store protected by
// password (for a Java broker's trustStore) and returns its path. It runs
// keytool, and skips the test when keytool is missing (failing when CI is
// set).
func (p *PKI) TrustStore(t testing.TB, password string) string {
	t.Helper()
	out := filepath.Join(p.Dir, "truststore.p12")
	keytool := lookTool(t, "keytool")
	cmd := exec.Command(keytool, "-importcert", "-noprompt", "-storetype", "PKCS12", "-alias", "sluice-ca",
		"-file", p.CAFile, "-keystore", out, "-storepass", password)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tlstest: keytool -importcert: %v: %s", err, b)
	}
	return out
}

func lookTool(t testing.TB, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("tlstest: %s not found (CI is set, so this fails instead of skipping)", name)
		}
		t.Skipf("tlstest: %s not found", name)
	}
	return path
}

type leaf struct {
	cn                  string
	dns                 []string
	ips                 []net.IP
	server              bool
	notBefore, notAfter time.Time
}

var serial struct {
	sync.Mutex
	n int64
}

// nextSerial returns a serial number no other certificate of the process
// has (parallel tests make PKIs at once).
func nextSerial() *big.Int {
	serial.Lock()
	defer serial.Unlock()
	if serial.n == 0 {
		serial.n = time.Now().UnixNano()
	}
	serial.n++
	return big.NewInt(serial.n)
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("tlstest: %v", err)
	}
	return k
}

func newCA(t testing.TB, name string) *issuer {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          nextSerial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"sluice tests"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("tlstest: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("tlstest: %v", err)
	}
	return &issuer{cert: cert, key: key}
}

// issue signs a leaf certificate with by and writes name.pem and
// name-key.pem.
func (p *PKI) issue(t testing.TB, name string, by *issuer, l leaf) (certFile, keyFile string) {
	t.Helper()
	if l.notBefore.IsZero() {
		l.notBefore = time.Now().Add(-time.Hour)
	}
	if l.notAfter.IsZero() {
		l.notAfter = time.Now().Add(24 * time.Hour)
	}
	usage := x509.ExtKeyUsageClientAuth
	if l.server {
		usage = x509.ExtKeyUsageServerAuth
	}
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(),
		Subject:      pkix.Name{CommonName: l.cn, Organization: []string{"sluice tests"}},
		DNSNames:     l.dns,
		IPAddresses:  l.ips,
		NotBefore:    l.notBefore,
		NotAfter:     l.notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, by.cert, &key.PublicKey, by.key)
	if err != nil {
		t.Fatalf("tlstest: %v", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("tlstest: %v", err)
	}
	certFile = p.writePEM(t, name+".pem", "CERTIFICATE", der, 0o644)
	keyFile = p.writePEM(t, name+"-key.pem", "PRIVATE KEY", keyDER, 0o600)
	return certFile, keyFile
}

func (p *PKI) writeCert(t testing.TB, name string, c *x509.Certificate) string {
	t.Helper()
	return p.writePEM(t, name, "CERTIFICATE", c.Raw, 0o644)
}

func (p *PKI) writePEM(t testing.TB, name, typ string, der []byte, mode os.FileMode) string {
	t.Helper()
	path := filepath.Join(p.Dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode); err != nil {
		t.Fatalf("tlstest: %v", err)
	}
	return path
}
