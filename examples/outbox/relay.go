package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// relay publishes the outbox with confirms and deletes only the rows the
// broker confirmed. A row whose publish was not confirmed stays and is
// published again by a later round, with the same message id: the
// consumer may see it twice and deduplicates by that id.
type relay struct {
	db     *sql.DB
	sender ports.Sender
	batch  int
}

// roundResult says what one round did.
type roundResult struct {
	sent, confirmed int
	kept            []string // keys of the rows kept for another round
}

// round publishes up to r.batch outbox rows, oldest first.
func (r *relay) round(ctx context.Context) (roundResult, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT seq, msg_id, topic, key, payload, headers FROM outbox ORDER BY seq LIMIT ?`, r.batch)
	if err != nil {
		return roundResult{}, err
	}
	var seqs []int64
	var msgs []ports.Message
	for rows.Next() {
		var seq int64
		var id, topic, key, headers string
		var payload []byte
		if err := rows.Scan(&seq, &id, &topic, &key, &payload, &headers); err != nil {
			rows.Close()
			return roundResult{}, err
		}
		var h ports.Headers
		if err := json.Unmarshal([]byte(headers), &h); err != nil {
			rows.Close()
			return roundResult{}, fmt.Errorf("outbox row %d: headers: %w", seq, err)
		}
		h.Set(ports.HeaderID, id) // stable across every publish of this row
		seqs = append(seqs, seq)
		msgs = append(msgs, ports.Message{Topic: ports.Topic(topic), Key: key, Payload: payload, Headers: h})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return roundResult{}, err
	}
	if len(msgs) == 0 {
		return roundResult{}, nil
	}

	res := roundResult{sent: len(msgs)}
	unconfirmed, err := unconfirmedIndexes(r.sender.Send(ctx, msgs...), len(msgs))
	if err != nil {
		return res, err // nothing known to be confirmed: keep every row
	}
	var done []any
	for i, seq := range seqs {
		if unconfirmed[i] {
			res.kept = append(res.kept, msgs[i].Key)
			continue
		}
		done = append(done, seq)
	}
	if len(done) > 0 {
		q := `DELETE FROM outbox WHERE seq IN (?` + strings.Repeat(",?", len(done)-1) + `)`
		if _, err := r.db.ExecContext(ctx, q, done...); err != nil {
			// The rows stay and are published again: a duplicate, never a loss.
			return res, fmt.Errorf("delete confirmed rows: %w", err)
		}
	}
	res.confirmed = len(done)
	return res, nil
}

// unconfirmedIndexes reads Send's error: nil means all confirmed; joined
// *ports.SendError values name the unconfirmed messages. Any other error
// is returned: then nothing is known to be confirmed.
func unconfirmedIndexes(err error, n int) (map[int]bool, error) {
	out := map[int]bool{}
	if err == nil {
		return out, nil
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		var se *ports.SendError
		if !errors.As(e, &se) || se.Index < 0 || se.Index >= n {
			return nil, err
		}
		out[se.Index] = true
	}
	return out, nil
}

// loop runs rounds every interval until stop is closed or ctx is done.
// Errors are handed to report and the loop goes on: rows stay in the
// outbox until confirmed. stop ends the loop between rounds, so a round
// under way still deletes the rows whose publish was confirmed (a round
// cut off by ctx after the confirm leaves its rows to be published again:
// a duplicate, never a loss).
func (r *relay) loop(ctx context.Context, stop <-chan struct{}, interval time.Duration, report func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := r.round(ctx); err != nil && ctx.Err() == nil {
			report(err)
		}
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// lossyLink is a sender whose confirms for the messages at the given
// indexes are lost on the way back: the broker has them, the relay does
// not know it. It simulates a connection dropped after the publish.
type lossyLink struct {
	ports.Sender
	lose map[int]bool
}

func (l lossyLink) Send(ctx context.Context, msgs ...ports.Message) error {
	if err := l.Sender.Send(ctx, msgs...); err != nil {
		return err
	}
	var errs []error
	for i, m := range msgs {
		if l.lose[i] {
			errs = append(errs, &ports.SendError{Index: i, Topic: m.Topic, Err: fmt.Errorf("%w (confirm lost, simulated)", ports.ErrUnconfirmed)})
		}
	}
	return errors.Join(errs...)
}
