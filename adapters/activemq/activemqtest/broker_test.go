package activemqtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3"

	"github.com/sluicemq/sluice/adapters/activemq/activemqtest"
)

// TestRestartKeepsPersistentMessages starts a broker, stores a persistent
// message, restarts the JVM and reads the message back.
func TestRestartKeepsPersistentMessages(t *testing.T) {
	b := activemqtest.Own(t, activemqtest.Options{})
	c, err := stomp.Dial("tcp", b.StompAddr)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Send("/queue/restart", "text/plain", []byte("kept"), stomp.SendOpt.Receipt, stomp.SendOpt.Header("persistent", "true")); err != nil {
		t.Fatal(err)
	}
	_ = c.Disconnect()
	pid := b.PID()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := b.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if b.PID() == pid {
		t.Fatalf("Restart kept pid %d", pid)
	}
	c, err = stomp.Dial("tcp", b.StompAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect()
	sub, err := c.Subscribe("/queue/restart", stomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-sub.C:
		if m.Err != nil || string(m.Body) != "kept" {
			t.Fatalf("got %v %q, want the stored message", m.Err, m.Body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the persistent message was not kept across the restart")
	}
}
