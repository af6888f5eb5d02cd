package portable_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/portable"
	"github.com/sluicemq/sluice/ports"
)

// reportingDriver's subscriptions learn of failures no call returns (a
// client that reconnects by itself) and report them through
// driver.Reporter.
type reportingDriver struct{ report func(error) }

func (*reportingDriver) Name() string                                       { return "reporting" }
func (*reportingDriver) Capabilities() ports.Capabilities                   { return ports.Capabilities{} }
func (*reportingDriver) SendBatch(context.Context, []ports.Message) []error { return nil }
func (*reportingDriver) Classify(error) driver.Class                        { return driver.Class{} }
func (*reportingDriver) Close(context.Context) error                        { return nil }
func (d *reportingDriver) Subscribe(context.Context, ports.SubscriptionSpec) (driver.Subscription, error) {
	return reportingSub{d}, nil
}

type reportingSub struct{ d *reportingDriver }

func (reportingSub) ReceiveBatch(ctx context.Context, _ int) ([]driver.Record, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}
func (reportingSub) SendAcks(context.Context, []any) error { return nil }
func (reportingSub) Close(context.Context) error           { return nil }
func (s reportingSub) SetReport(report func(error))        { s.d.report = report }

// A driver.Reporter's reports reach Errors, scrubbed of secrets, without
// a Receive; after Stop they are dropped.
func TestReporterReachesErrors(t *testing.T) {
	d := &reportingDriver{}
	a := portable.New(d, portable.Options{Logger: quiet, Secrets: []string{"s3cret"}})
	defer a.Close(context.Background())
	sub, err := a.Subscribe(context.Background(), ports.SubscriptionSpec{Topic: "t", Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	if d.report == nil {
		t.Fatal("SetReport was not called by Subscribe")
	}
	d.report(errors.New("connection lost (password s3cret)"))
	if err := <-sub.Errors(); err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "connection lost") {
		t.Fatalf("Errors() = %v, want the report without the secret", err)
	}
	if err := sub.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	d.report(errors.New("after stop")) // dropped, never a panic
	if _, ok := <-sub.Errors(); ok {
		t.Fatal("a report after Stop reached Errors")
	}
}
