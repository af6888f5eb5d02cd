package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/operators/inbox"
	"github.com/sluicemq/sluice/ports"
)

// A message published twice with one id (a producer's retry) makes one
// invoice: the second delivery finds the inbox record and is acked
// without calling the handler.
func ExampleSink() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // one in-memory database
	if _, err := db.ExecContext(ctx, `CREATE TABLE invoices (order_id TEXT, total INTEGER)`); err != nil {
		panic(err)
	}
	ib, err := inbox.New(ctx, db, inbox.Options{})
	if err != nil {
		panic(err)
	}

	broker, _ := mem.NewBroker()
	defer broker.Close(context.Background())
	adapter, _ := mem.New(broker)
	defer adapter.Close(context.Background())

	type Order struct {
		ID    string
		Total int
	}
	acked := make(chan struct{}, 2)
	p := flow.New(adapter, ports.SubscriptionSpec{Topic: "orders", Group: "billing", QoS: ports.ExactlyOnce},
		flow.WithObserver(func(e flow.Event) {
			if e.Action == ports.Ack {
				acked <- struct{}{}
			}
		}))
	inbox.Sink(flow.Decode[Order](p.Source()), ib, func(ctx context.Context, tx *sql.Tx, o Order) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO invoices (order_id, total) VALUES (?, ?)`, o.ID, o.Total)
		return err
	})
	if err := p.Start(ctx); err != nil {
		panic(err)
	}
	for range 2 {
		m := ports.Message{Topic: "orders", Payload: []byte(`{"ID":"o-1","Total":42}`), Headers: ports.NewHeaders(ports.HeaderID, "order-o-1")}
		if err := adapter.Send(ctx, m); err != nil {
			panic(err)
		}
	}
	<-acked
	<-acked
	_ = p.Stop(ctx)

	var n int
	_ = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM invoices`).Scan(&n)
	fmt.Println("invoices:", n)
	fmt.Printf("%+v\n", ib.Stats())
	// Output:
	// invoices: 1
	// {Processed:1 Duplicates:1 WithoutIdentity:0 Retries:0}
}
