package deadletter_test

import (
	"encoding/json"
	"testing"

	"github.com/sluicemq/sluice/operators/deadletter"
)

// FuzzParseRecord: any payload on the audit topic decodes to a record or
// an error, never a panic, and a record round-trips.
func FuzzParseRecord(f *testing.F) {
	f.Add([]byte(`{"id":"a-1","action":"redrive","operator":"alice","note":"n","ids":["o-1"],"count":1}`))
	f.Add([]byte(`{"id":"","action":"purge"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := deadletter.ParseRecord(b)
		if err != nil {
			return
		}
		again, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("a parsed record does not encode: %v", err)
		}
		r2, err := deadletter.ParseRecord(again)
		if err != nil || r2.ID != r.ID || r2.Action != r.Action || r2.Count != r.Count {
			t.Fatalf("round trip %+v -> %+v, %v", r, r2, err)
		}
	})
}
