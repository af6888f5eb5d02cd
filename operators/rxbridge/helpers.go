package rxbridge

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/reactivex/rxgo/v2"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// TypeError reports a value in the chain that is not the *Msg a helper or
// the bridge expected. It is fatal: the chain is built wrong.
type TypeError struct {
	Got  any
	Want string
}

func (e *TypeError) Error() string { return fmt.Sprintf("rxbridge: got %T, want %s", e.Got, e.Want) }

func msgOf[T any](v any) (*Msg[T], error) {
	m, ok := v.(*Msg[T])
	if !ok {
		return nil, &TypeError{Got: v, Want: fmt.Sprintf("%T", (*Msg[T])(nil))}
	}
	return m, nil
}

// Map returns an rxgo.Func for Observable.Map that applies fn to each
// *Msg[In]'s value and emits a *Msg[Out] with the same completion. When fn
// fails (or panics) the Msg is completed with the error and travels on as
// a completed *Msg[Out], which Keep drops and the bridge skips. A
// completed Msg passes through untouched.
func Map[In, Out any](fn func(context.Context, In) (Out, error)) rxgo.Func {
	return func(_ context.Context, v any) (any, error) {
		m, err := msgOf[In](v)
		if err != nil {
			return nil, err
		}
		var zero Out
		if m.Done() {
			return With(m, zero), nil
		}
		out, err := call(func() (Out, error) { return fn(m.Ctx, m.Value) })
		if err != nil {
			_ = m.Fail(err)
			return With(m, zero), nil
		}
		return With(m, out), nil
	}
}

// Keep returns an rxgo.Predicate for Observable.Filter that keeps the
// *Msg[T] for which keep returns true. A dropped Msg is completed
// successfully (ACK: it was handled by deciding it needs nothing); one
// whose keep fails (or panics) is completed with the error; completed
// Msgs are dropped.
func Keep[T any](keep func(context.Context, T) (bool, error)) rxgo.Predicate {
	return func(v any) bool {
		m, err := msgOf[T](v)
		if err != nil {
			return true // let the bridge report the type error
		}
		if m.Done() {
			return false
		}
		ok, err := call(func() (bool, error) { return keep(m.Ctx, m.Value) })
		switch {
		case err != nil:
			_ = m.Fail(err)
			return false
		case !ok:
			_ = m.Succeed()
			return false
		}
		return true
	}
}

// Joined returns an rxgo.Func for the output of Observable.BufferWithCount,
// BufferWithTime or BufferWithTimeOrCount: it turns a buffer ([]any of
// *Msg[T]) into one *Msg[[]T] whose outcome completes every live member
// (flow.Join: a batch has one outcome). Completed members are left out.
// Its context is that of the first member.
func Joined[T any]() rxgo.Func {
	return func(ctx context.Context, v any) (any, error) {
		buf, ok := v.([]any)
		if !ok {
			return nil, &TypeError{Got: v, Want: "[]interface{} of *Msg from an rxgo buffer"}
		}
		out := &Msg[[]T]{Ctx: ctx}
		var cs []*flow.Completion
		for _, x := range buf {
			m, err := msgOf[T](x)
			if err != nil {
				return nil, err
			}
			out.members = append(out.members, m.inputs()...)
			if m.Done() {
				continue
			}
			if len(cs) == 0 {
				out.Ctx = m.Ctx
			}
			out.Value = append(out.Value, m.Value)
			cs = append(cs, m.c)
		}
		out.c = flow.Join(cs...)
		if len(cs) == 0 {
			_ = out.c.Succeed() // nothing live: a completed, empty batch
		}
		return out, nil
	}
}

func call[R any](fn func() (R, error)) (r R, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &ports.PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return fn()
}
