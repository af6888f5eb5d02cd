package kit

import "github.com/sluicemq/sluice/ports"

// SendPrepared is a driver's SendBatch over a client that sends and
// confirms a batch of its own records (a Kafka producer's): prepare
// converts each message, and a message it refuses is not sent, its error
// standing for it; send sends the prepared records, in order, and returns
// nil when each was confirmed, else one error per record. SendPrepared
// returns nil when every message was confirmed, else a slice of
// len(msgs) whose element i is the error of msgs[i].
func SendPrepared[R any](msgs []ports.Message, prepare func(*ports.Message) (R, error), send func([]R) []error) []error {
	var errs []error
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, len(msgs))
		}
		errs[i] = err
	}
	recs := make([]R, 0, len(msgs))
	idx := make([]int, 0, len(msgs))
	for i := range msgs {
		r, err := prepare(&msgs[i])
		if err != nil {
			fail(i, err)
			continue
		}
		recs, idx = append(recs, r), append(idx, i)
	}
	if len(recs) == 0 {
		return errs
	}
	for j, err := range send(recs) {
		if err != nil {
			fail(idx[j], err)
		}
	}
	return errs
}
