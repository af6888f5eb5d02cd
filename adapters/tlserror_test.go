package adapters_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/internal/tlstest"
)

// listen serves each connection with serve on 127.0.0.1 until the test
// ends, and returns the address.
func listen(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				serve(c)
			}()
		}
	}()
	t.Cleanup(func() { l.Close(); wg.Wait() })
	return l.Addr().String()
}

// tlsServer serves TLS with cert and key, requiring a client certificate
// signed by the CA when requireClient.
func tlsServer(t *testing.T, pki *tlstest.PKI, cert, key string, requireClient bool) string {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	conf := pki.ServerConfig(t)
	conf.Certificates = []tls.Certificate{pair}
	if requireClient {
		conf.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return listen(t, func(c net.Conn) {
		tc := tls.Server(c, conf)
		if tc.Handshake() == nil {
			_, _ = tc.Write([]byte("hello"))
		}
	})
}

func pool(t *testing.T, file string) *x509.CertPool {
	t.Helper()
	pem, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(pem)
	return p
}

// dialTLS connects, handshakes and reads the server's first bytes, as a
// broker client's connect does, and returns the first error.
func dialTLS(addr string, conf *tls.Config) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	tc := tls.Client(c, conf)
	if err := tc.Handshake(); err != nil {
		return err
	}
	_, err = io.ReadFull(tc, make([]byte, 5)) // TLS 1.3: a refused client certificate shows here
	return err
}

func TestExplainTLSSaysWhichCheckFailed(t *testing.T) {
	pki := tlstest.New(t)
	client := func(ca string, certs ...string) *tls.Config {
		c := &tls.Config{RootCAs: pool(t, ca), ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
		if len(certs) == 2 {
			pair, err := tls.LoadX509KeyPair(certs[0], certs[1])
			if err != nil {
				t.Fatal(err)
			}
			c.Certificates = []tls.Certificate{pair}
		}
		return c
	}
	good := tlsServer(t, pki, pki.ServerCert, pki.ServerKey, false)
	mutual := tlsServer(t, pki, pki.ServerCert, pki.ServerKey, true)
	plainAnswer := listen(t, func(c net.Conn) { _, _ = c.Write([]byte("AMQP\x00\x00\x09\x01")) })
	plainClose := listen(t, func(c net.Conn) { _, _ = c.Read(make([]byte, 1)) })

	if err := dialTLS(good, client(pki.CAFile)); err != nil {
		t.Fatalf("the good connection fails: %v", err)
	}
	if err := dialTLS(mutual, client(pki.CAFile, pki.ClientCert, pki.ClientKey)); err != nil {
		t.Fatalf("the good mutual connection fails: %v", err)
	}
	for _, c := range []struct {
		name string
		addr string
		conf *tls.Config
		want string
	}{
		{"wrong CA", good, client(pki.OtherCAFile), "unknown authority; give the CA that signed it with ca_file="},
		{"expired", tlsServer(t, pki, pki.ExpiredCert, pki.ExpiredKey, false), client(pki.CAFile), "the broker's certificate has expired (on "},
		{"wrong host", tlsServer(t, pki, pki.WrongHostCert, pki.WrongHostKey, false), client(pki.CAFile), "the broker's certificate is for another host"},
		// Go's client sends no certificate the server's list of CAs
		// does not name, so the server says none came.
		{"untrusted client certificate", mutual, client(pki.CAFile, pki.OtherClientCert, pki.OtherClientKey), "it requires a client certificate and this client sent none"},
		{"expired client certificate", mutual, client(pki.CAFile, pki.ExpiredClientCert, pki.ExpiredClientKey), "the broker refused the TLS handshake with the alert"},
		{"no client certificate", mutual, client(pki.CAFile), "it requires a client certificate"},
		{"plaintext answer", plainAnswer, client(pki.CAFile), "the broker answered in plaintext, not TLS"},
		{"plaintext close", plainClose, client(pki.CAFile), "not a TLS port?"},
	} {
		err := dialTLS(c.addr, c.conf)
		if err == nil {
			t.Errorf("%s: the connection succeeded", c.name)
			continue
		}
		got := adapters.ExplainTLS(c.addr, err)
		var te *adapters.TLSError
		if !errors.Is(got, adapters.ErrTLS) || !errors.As(got, &te) || te.Addr != c.addr || !errors.Is(got, err) {
			t.Errorf("%s: ExplainTLS(%v) = %v, want a *TLSError wrapping ErrTLS and the cause", c.name, err, got)
			continue
		}
		if !strings.Contains(got.Error(), c.want) {
			t.Errorf("%s: %v\ndoes not say %q", c.name, got, c.want)
		}
		// A client that flattens the error into text is understood too.
		if flat := adapters.ExplainTLS(c.addr, errors.New("client: "+err.Error())); !errors.Is(flat, adapters.ErrTLS) {
			t.Errorf("%s: the flattened %q is not recognised", c.name, err)
		}
	}
	if adapters.ExplainTLS("h", nil) != nil {
		t.Error("ExplainTLS(nil) != nil")
	}
	other := errors.New("connection refused")
	if got := adapters.ExplainTLS("h", other); got != other {
		t.Errorf("a non-TLS error became %v", got)
	}
	once := adapters.ExplainTLS("h", io.EOF)
	if twice := adapters.ExplainTLS("h", once); twice != once {
		t.Errorf("explained twice: %v", twice)
	}
}
