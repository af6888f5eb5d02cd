package flow

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// MemberOutcomes is a batch handler's result that settles each member of
// the batch on its own: ack these, requeue these, dead-letter these. A
// batch is an item whose completion is a Join of its members (flow.Join,
// operators.Batch); MemberOutcomes names the members by their index in
// that Join (the order of Batched.Values in operators.Batch).
//
// Return it as the batch handler's error (Err returns nil when it names
// no member, so every member is then acked):
//
//	var out flow.MemberOutcomes
//	for i, o := range batch {
//		switch err := store(o); {
//		case errors.Is(err, errBusy):
//			out.Requeue(i, err)
//		case err != nil:
//			out.DeadLetter(i, err)
//		}
//	}
//	return out.Err()
//
// Members it does not name are acked. A requeued member is retried like a
// failed single delivery: counted (Stats.Requeued), with the backoff of
// SubscriptionSpec.Retry, and dead-lettered once its MaxAttempts
// deliveries have failed. A dead-lettered member goes to the dead-letter
// topic with its own reason (or is requeued with MaxBackoff when dead
// letters are disabled).
//
// Settlement goes through the pipeline's settlement engine with as few
// Settle calls as the dispositions allow: the acked members in one call
// (shared with the round's other ACKs), and one call per group of members
// with the same disposition, redelivery count and reason text (each such
// group has one backoff, one attempt number and one dead-letter reason).
// A batch of 10 with 2 members requeued and 2 dead-lettered, each pair with
// one reason and one redelivery count, takes 3 Settle calls.
//
// A MemberOutcomes naming an index outside the batch fails the whole batch
// (every member requeued) with an error saying so: a handler's indexing
// mistake must not ack members it never looked at.
//
// The zero value is ready to use; it is not safe for concurrent use.
type MemberOutcomes struct {
	set   map[int]Outcome
	order []int // indexes in the order named, for Error
}

// Ack marks member i acked (the default for members not named; use it to
// take back an earlier Requeue or DeadLetter).
func (m *MemberOutcomes) Ack(i int) { m.mark(i, Outcome{Kind: Succeeded}) }

// Requeue marks member i for redelivery because of reason (its requeue
// reason, and its dead-letter reason once its retries are exhausted). A
// nil reason is replaced by one saying the batch handler requeued it.
func (m *MemberOutcomes) Requeue(i int, reason error) {
	if reason == nil {
		reason = errors.New("requeued by the batch handler")
	}
	m.mark(i, Outcome{Kind: Failed, Err: reason})
}

// DeadLetter marks member i for the dead-letter topic with reason (made
// poison). A nil reason is replaced by one saying the batch handler
// dead-lettered it.
func (m *MemberOutcomes) DeadLetter(i int, reason error) {
	if reason == nil {
		reason = errors.New("dead-lettered by the batch handler")
	}
	m.mark(i, Outcome{Kind: Poisoned, Err: reason})
}

func (m *MemberOutcomes) mark(i int, o Outcome) {
	if m.set == nil {
		m.set = make(map[int]Outcome)
	}
	if _, ok := m.set[i]; !ok {
		m.order = append(m.order, i)
	}
	m.set[i] = o
}

// Outcome returns the outcome member i will get (Succeeded when not
// named).
func (m *MemberOutcomes) Outcome(i int) Outcome {
	if o, ok := m.set[i]; ok {
		return o
	}
	return Outcome{Kind: Succeeded}
}

// Err returns m as an error when it names a member that is not acked, and
// nil otherwise (every member is then acked).
func (m *MemberOutcomes) Err() error {
	if m == nil {
		return nil
	}
	for _, o := range m.set {
		if o.Kind != Succeeded {
			return m
		}
	}
	return nil
}

func (m *MemberOutcomes) Error() string {
	idx := make([]int, 0, len(m.set))
	for _, i := range m.order {
		if m.set[i].Kind != Succeeded {
			idx = append(idx, i)
		}
	}
	sort.Ints(idx)
	var b strings.Builder
	fmt.Fprintf(&b, "batch member outcomes (%d not acked):", len(idx))
	for _, i := range idx {
		o := m.set[i]
		what := "requeue"
		if o.Kind == Poisoned {
			what = "dead-letter"
		}
		fmt.Fprintf(&b, " [%d] %s: %v;", i, what, o.Err)
	}
	return strings.TrimSuffix(b.String(), ";")
}

// outOfRange returns the first index m names outside 0..n-1, or -1.
func (m *MemberOutcomes) outOfRange(n int) int {
	for _, i := range m.order {
		if i < 0 || i >= n {
			return i
		}
	}
	return -1
}

// memberOutcomes returns the MemberOutcomes inside a batch outcome, or nil.
func memberOutcomes(o Outcome) *MemberOutcomes {
	if o.Kind != Failed && o.Kind != Poisoned {
		return nil
	}
	var m *MemberOutcomes
	if errors.As(o.Err, &m) && m != nil {
		return m
	}
	return nil
}

// IsMemberOutcomes reports whether o carries a *MemberOutcomes that a
// Join will apply member by member. Operators that complete a batch's
// members themselves use it to hand such an outcome to a Join instead.
func IsMemberOutcomes(o Outcome) bool { return memberOutcomes(o) != nil }

// MemberRangeError is the outcome of a batch whose MemberOutcomes named an
// index outside the batch: every member is requeued with it.
type MemberRangeError struct {
	Index, Size int
	Outcomes    *MemberOutcomes
}

func (e *MemberRangeError) Error() string {
	return fmt.Sprintf("batch handler named member %d of a batch of %d (indexes are 0..%d): the whole batch is requeued", e.Index, e.Size, e.Size-1)
}

// completeEach completes the members of a Join from m: each member with
// its own outcome. Members that are deliveries of one pipeline are handed
// to its settlement engine in groups of one outcome (Kind and reason
// text), so each group is settled with one Settle call per redelivery
// count.
func (js joined) completeEach(m *MemberOutcomes) {
	if i := m.outOfRange(len(js)); i >= 0 {
		js.completed(Outcome{Kind: Failed, Err: &MemberRangeError{Index: i, Size: len(js), Outcomes: m}})
		return
	}
	type bucket struct {
		p     *Pipeline
		o     Outcome
		roots []*root
	}
	var buckets []*bucket
	find := func(p *Pipeline, o Outcome) *bucket {
		reason := ""
		if o.Err != nil {
			reason = o.Err.Error()
		}
		for _, b := range buckets {
			if b.p == p && b.o.Kind == o.Kind && (b.o.Err == nil && o.Err == nil || b.o.Err != nil && o.Err != nil && b.o.Err.Error() == reason) {
				return b
			}
		}
		b := &bucket{p: p, o: o}
		buckets = append(buckets, b)
		return b
	}
	for i, c := range js {
		o := m.Outcome(i)
		next, _ := c.finish(o) // a conflict is reported by the member itself
		switch n := next.(type) {
		case nil:
		case *root:
			b := find(n.p, o)
			b.roots = append(b.roots, n)
		default:
			n.completed(o)
		}
	}
	for _, b := range buckets {
		b.p.settleBatch(b.roots, b.o)
	}
}
