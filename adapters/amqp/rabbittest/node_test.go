package rabbittest_test

import (
	"context"
	"os"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/adapters/amqp/rabbittest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := rabbittest.StopShared(); err != nil && code == 0 {
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			println(err.Error())
			code = 1
		}
	}
	os.Exit(code)
}

func TestNodeRestartAndProxyCut(t *testing.T) {
	node := rabbittest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	p, err := rabbittest.NewProxy(node.URL[len("amqp://guest:guest@") : len(node.URL)-1])
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	conn, err := amqp.Dial(p.URL())
	if err != nil {
		t.Fatalf("dial through proxy: %v", err)
	}
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	if n := p.Cut(); n != 1 {
		t.Fatalf("Cut cut %d connections, want 1", n)
	}
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("connection not closed after Cut")
	}

	direct, err := amqp.Dial(node.URL)
	if err != nil {
		t.Fatal(err)
	}
	dclosed := direct.NotifyClose(make(chan *amqp.Error, 1))
	if err := node.StopApp(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-dclosed:
		t.Logf("connection closed by stop_app: %v", e)
	case <-ctx.Done():
		t.Fatal("connection not closed by stop_app")
	}
	if _, err := amqp.Dial(node.URL); err == nil {
		t.Fatal("dial succeeded while the app is stopped")
	}
	if err := node.StartApp(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := amqp.Dial(node.URL)
	if err != nil {
		t.Fatalf("dial after start_app: %v", err)
	}
	again.Close()
}
