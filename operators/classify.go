package operators

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// Rule reports whether an error is poison: a failure no retry can fix.
type Rule func(error) bool

// PoisonIs makes errors matching any target (errors.Is) poison.
func PoisonIs(targets ...error) Rule {
	return func(err error) bool {
		for _, t := range targets {
			if errors.Is(err, t) {
				return true
			}
		}
		return false
	}
}

// PoisonAs makes errors of type E anywhere in the chain (errors.As) poison.
func PoisonAs[E error]() Rule {
	return func(err error) bool {
		var target E
		return errors.As(err, &target)
	}
}

// PoisonIf makes errors for which pred returns true poison.
func PoisonIf(pred func(error) bool) Rule { return Rule(pred) }

// SchemaVersionError reports a message whose schema version the consumer
// does not understand. It is poison: no retry makes an unknown version
// known.
type SchemaVersionError struct {
	Type    string // the payload type (ports.HeaderType), if known
	Version string // the version found
	Want    string // the versions accepted, for the dead-letter reason
}

func (e *SchemaVersionError) Error() string {
	s := fmt.Sprintf("unsupported schema version %q", e.Version)
	if e.Type != "" {
		s += " of " + e.Type
	}
	if e.Want != "" {
		s += " (accepted: " + e.Want + ")"
	}
	return s
}

// Is makes errors.Is(err, ports.ErrPoison) true.
func (e *SchemaVersionError) Is(target error) bool { return target == ports.ErrPoison }

// DefaultRules are the rules a Classifier applies unless NoDefaults is
// set: malformed JSON, JSON of the wrong shape and corrupt base64 are
// poison (ports.DecodeError, ports.HeaderError and SchemaVersionError are
// poison already, classifier or not).
func DefaultRules() []Rule {
	return []Rule{
		PoisonAs[*json.SyntaxError](),
		PoisonAs[*json.UnmarshalTypeError](),
		PoisonAs[base64.CorruptInputError](),
	}
}

// Classifier turns errors into poison by rule, so they go straight to the
// dead letter instead of burning retries. The zero value applies
// DefaultRules.
type Classifier struct {
	// Rules are checked in order after the defaults; the first match
	// makes the error poison.
	Rules []Rule
	// NoDefaults leaves DefaultRules out.
	NoDefaults bool
}

// Classify returns err made poison (ports.Poison) when a rule matches it,
// and err unchanged otherwise (nil stays nil, poison stays poison).
// Context errors are never made poison: they mean cancellation.
func (c Classifier) Classify(err error) error {
	if err == nil || ports.IsPoison(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if !c.NoDefaults {
		for _, r := range defaultRules {
			if r(err) {
				return ports.Poison(err)
			}
		}
	}
	for _, r := range c.Rules {
		if r(err) {
			return ports.Poison(err)
		}
	}
	return err
}

var defaultRules = DefaultRules()

// Wrap returns fn with its errors classified: use it around a Sink or Map
// handler.
func Wrap[T any](c Classifier, fn func(context.Context, T) error) func(context.Context, T) error {
	return func(ctx context.Context, v T) error { return c.Classify(fn(ctx, v)) }
}

// Classify classifies the failure of everything downstream of it: when an
// item (or anything derived from it: a batch it joined, the parts it was
// split into) fails with an error a rule matches, the item is poisoned
// instead, so its delivery is dead-lettered with that error as the reason
// rather than requeued.
//
// Settlement: each item is completed exactly once, with its downstream
// outcome, reclassified; nothing else changes. Place it right after the
// source to cover the whole pipeline. Order is kept.
func Classify[T any](in flow.Stream[T], c Classifier) flow.Stream[T] {
	return flow.Via(in, func(it flow.Item[T], emit flow.Emit[T]) {
		parent := it.Completion
		it.Completion = parent.Derive(func(o flow.Outcome) {
			if o.Kind == flow.Failed {
				if err := c.Classify(o.Err); ports.IsPoison(err) {
					o = flow.Outcome{Kind: flow.Poisoned, Err: err}
				}
			}
			_ = parent.Complete(o)
		})
		emit(it)
	})
}
