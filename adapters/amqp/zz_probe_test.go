package amqp_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/adapters/amqp/rabbittest"
)

func TestZZProbeRawRestart(t *testing.T) {
	if os.Getenv("ZZPROBE") == "" {
		t.Skip()
	}
	node := rabbittest.Own(t, rabbittest.Options{})
	conn, err := amqp091.Dial(node.URL)
	if err != nil {
		t.Fatal(err)
	}
	ch, _ := conn.Channel()
	args := amqp091.Table{"x-queue-type": "quorum"}
	if os.Getenv("ZZCLASSIC") != "" {
		args = nil
	}
	if _, err := ch.QueueDeclare("probe", true, false, false, false, args); err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare("probe.x", "direct", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("probe", "k", "probe.x", false, nil); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	start := time.Now()
	var mu sync.Mutex
	acked := map[int]time.Duration{}
	var log []string
	stopPub := make(chan struct{})
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		i := 0
		for {
			select {
			case <-stopPub:
				return
			default:
			}
			c, err := amqp091.Dial(node.URL)
			if err != nil {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			ch, err := c.Channel()
			if err != nil {
				c.Close()
				continue
			}
			ch.Confirm(false)
			rets := ch.NotifyReturn(make(chan amqp091.Return, 10000))
			go func() {
				for r := range rets {
					mu.Lock()
					log = append(log, fmt.Sprintf("%v RETURN %s %s", time.Since(start), r.MessageId, r.ReplyText))
					mu.Unlock()
				}
			}()
			for {
				select {
				case <-stopPub:
					c.Close()
					return
				default:
				}
				// one call of 20
				var dcs []*amqp091.DeferredConfirmation
				first := i
				for k := 0; k < 20; k++ {
					dc, err := ch.PublishWithDeferredConfirm("probe.x", "k", os.Getenv("ZZMAND") != "", false, amqp091.Publishing{DeliveryMode: 2, MessageId: fmt.Sprint(i), Body: []byte("x")})
					if err != nil {
						break
					}
					dcs = append(dcs, dc)
					i++
				}
				okAll := true
				for k, dc := range dcs {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					ack, err := dc.WaitContext(ctx)
					cancel()
					if err == nil && ack {
						mu.Lock()
						acked[first+k] = time.Since(start)
						mu.Unlock()
					} else {
						okAll = false
					}
				}
				if !okAll || len(dcs) < 20 {
					mu.Lock()
					log = append(log, fmt.Sprintf("%v batch from %d: %d published, some failed", time.Since(start), first, len(dcs)))
					mu.Unlock()
					c.Close()
					break
				}
				time.Sleep(2 * time.Millisecond)
			}
		}
	}()
	time.Sleep(2 * time.Second)
	ctx := context.Background()
	t.Logf("%v stop_app", time.Since(start))
	if err := node.StopApp(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("%v stop_app done; start_app", time.Since(start))
	if err := node.StartApp(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("%v start_app done", time.Since(start))
	time.Sleep(3 * time.Second)
	close(stopPub)
	<-pubDone
	for _, l := range log {
		t.Log(l)
	}
	// drain
	c, err := amqp091.Dial(node.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cch, _ := c.Channel()
	cch.Qos(500, 0, false)
	ds, err := cch.Consume("probe", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for {
		select {
		case d := <-ds:
			got[d.MessageId] = true
			d.Ack(false)
			continue
		case <-time.After(3 * time.Second):
		}
		break
	}
	lost := 0
	for i, at := range acked {
		if !got[fmt.Sprint(i)] {
			lost++
			t.Logf("LOST %d acked at %v", i, at)
		}
	}
	t.Logf("acked %d, got %d, lost %d", len(acked), len(got), lost)
}
