package embedded

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/adapters/internal/tlstest"
)

// Close ends every kind of connection — a connected client that reads
// nothing while the broker has megabytes for it, one that sent half a
// CONNECT, one that sent nothing, a well-behaved one (told 0x8B) — within
// its bound, and leaves no goroutine behind (start's cleanup checks).
// Close is idempotent.
func TestCloseIsBoundedAndLeakFree(t *testing.T) {
	b := start(t, Options{})
	stuck, _ := connected(t, b, connectOpts{id: "stuck", clean: true})
	stuck.sub("big")
	good, _ := connected(t, b, connectOpts{id: "good", clean: true})
	payload := string(make([]byte, 64<<10))
	for range 100 {
		good.mustPublish("big", payload)
	}
	half := dial(t, b)
	if _, err := half.nc.Write([]byte{0x10, 40, 0, 4, 'M', 'Q'}); err != nil {
		t.Fatal(err)
	}
	silent := dial(t, b)
	waitFor(t, "four connections", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.conns) == 4
	})

	at := time.Now()
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	took := time.Since(at)
	if bound := writeGrace + linger + time.Second; took > bound {
		t.Fatalf("Close took %v, want within %v (its write grace and linger)", took, bound)
	}
	t.Logf("Close took %v", took)
	good.expectDisconnect(codeShuttingDown)
	for _, c := range []*client{half, silent} {
		if dp := c.disconnected(); dp != nil {
			t.Fatalf("a connection without CONNACK got DISCONNECT %s", describe(dp))
		}
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := net.DialTimeout("tcp", b.Addr(), time.Second); err == nil {
		t.Fatal("the broker still accepts connections after Close")
	}
}

// connectV5 is an MQTT 5 CONNECT with a clean start for id.
func connectV5(id string) []byte {
	var buf packetBuffer
	_, _ = (connectOpts{id: id, clean: true}).packet().WriteTo(&buf)
	return buf
}

// Close while clients connect and disconnect returns in time and leaves
// no goroutine.
func TestCloseWhileClientsComeAndGo(t *testing.T) {
	before := goleak.IgnoreCurrent()
	for round := range 20 {
		b, err := Start(Options{})
		if err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for g := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					c, err := net.DialTimeout("tcp", b.Addr(), time.Second)
					if err != nil {
						return // the broker closed its listener
					}
					_, _ = c.Write(connectV5(fmt.Sprintf("c%d-%d-%d", round, g, i)))
					if i%2 == 0 {
						_ = c.SetReadDeadline(time.Now().Add(time.Second))
						_, _ = c.Read(make([]byte, 4)) // CONNACK: the client is attached
					}
					_ = c.Close()
				}
			}()
		}
		waitFor(t, "clients attached", func() bool {
			b.mu.Lock()
			defer b.mu.Unlock()
			return len(b.sessions) >= 3 || len(b.conns) >= 3
		})
		at := time.Now()
		err = b.Close()
		took := time.Since(at)
		close(stop)
		wg.Wait()
		if err != nil || took > writeGrace+linger+time.Second {
			t.Fatalf("round %d: Close = %v after %v, want nil within its bound", round, err, took)
		}
	}
	goleak.VerifyNone(t, before)
}

// A TLS listener: mqtts:// URL, an MQTT 5 session over TLS, and a
// plaintext client refused.
func TestTLSListener(t *testing.T) {
	pki := tlstest.New(t)
	b := start(t, Options{TLS: pki.ServerConfig(t), Users: map[string]string{"svc": "pw"}})
	if !strings.HasPrefix(b.URL(), "mqtts://") {
		t.Fatalf("URL %s, want mqtts://", b.URL())
	}
	ca, err := os.ReadFile(pki.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	cfg := &tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS12}
	sub := dialTLS(t, b, cfg)
	if ca := sub.connect(connectOpts{id: "sub", clean: true, user: "svc", pass: "pw"}); ca.ReasonCode != 0 {
		t.Fatalf("CONNACK 0x%02X over TLS", ca.ReasonCode)
	}
	sub.sub("secure")
	pub := dialTLS(t, b, cfg)
	if ca := pub.connect(connectOpts{id: "pub", clean: true, user: "svc", pass: "pw"}); ca.ReasonCode != 0 {
		t.Fatalf("CONNACK 0x%02X over TLS", ca.ReasonCode)
	}
	pub.mustPublish("secure", "over tls")
	sub.puback(sub.expectPublish("over tls").PacketID)

	plain := dial(t, b)
	plain.send((connectOpts{id: "plain", clean: true}).packet())
	if pk, err := plain.tryRead(wait); err == nil {
		t.Fatalf("a plaintext client on the TLS port got %s", pk.PacketType())
	}
	bad := dialTLS(t, b, cfg)
	if ca := bad.connect(connectOpts{id: "bad", clean: true, user: "svc", pass: "nope"}); ca.ReasonCode != codeBadCredentials {
		t.Fatalf("CONNACK 0x%02X for a bad password over TLS, want 0x86", ca.ReasonCode)
	}
}
