package pulsar

import (
	"fmt"
	"maps"

	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"
)

// ClientError is an error the Pulsar client logged. The client reconnects
// and retries on its own and reports connection and lifecycle failures only
// through its logger; when the adapter creates the client it installs a
// logger that also hands every error-level entry to each live
// Subscription's Errors channel as a *ClientError.
type ClientError struct {
	Msg    string
	Fields map[string]any
	Err    error // the error attached with WithError, if any
}

func (e *ClientError) Error() string {
	s := "pulsar client: " + e.Msg
	if len(e.Fields) > 0 {
		s += fmt.Sprintf(" %v", e.Fields)
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the attached error.
func (e *ClientError) Unwrap() error { return e.Err }

// errorLogger wraps the client's logger and forwards error-level entries
// to sink. It implements both pulsarlog.Logger and pulsarlog.Entry.
type errorLogger struct {
	inner  pulsarlog.Logger // nil for an entry
	entry  pulsarlog.Entry  // nil for a logger
	fields pulsarlog.Fields
	err    error
	sink   func(error)
}

func newErrorLogger(inner pulsarlog.Logger, sink func(error)) pulsarlog.Logger {
	return &errorLogger{inner: inner, sink: sink}
}

func (l *errorLogger) with(f pulsarlog.Fields, err error, e pulsarlog.Entry) *errorLogger {
	fields := maps.Clone(l.fields)
	if fields == nil && len(f) > 0 {
		fields = pulsarlog.Fields{}
	}
	maps.Copy(fields, f)
	if err == nil {
		err = l.err
	}
	return &errorLogger{entry: e, fields: fields, err: err, sink: l.sink}
}

func (l *errorLogger) base() interface {
	Debug(...any)
	Info(...any)
	Warn(...any)
	Error(...any)
	Debugf(string, ...any)
	Infof(string, ...any)
	Warnf(string, ...any)
	Errorf(string, ...any)
} {
	if l.entry != nil {
		return l.entry
	}
	return l.inner
}

func (l *errorLogger) forward(msg string) {
	l.sink(&ClientError{Msg: msg, Fields: l.fields, Err: l.err})
}

// SubLogger implements pulsarlog.Logger.
func (l *errorLogger) SubLogger(f pulsarlog.Fields) pulsarlog.Logger {
	s := l.with(f, nil, nil)
	s.inner = l.inner.SubLogger(f)
	return s
}

// WithFields implements pulsarlog.Logger and pulsarlog.Entry.
func (l *errorLogger) WithFields(f pulsarlog.Fields) pulsarlog.Entry {
	if l.entry != nil {
		return l.with(f, nil, l.entry.WithFields(f))
	}
	return l.with(f, nil, l.inner.WithFields(f))
}

// WithField implements pulsarlog.Logger and pulsarlog.Entry.
func (l *errorLogger) WithField(name string, v any) pulsarlog.Entry {
	return l.WithFields(pulsarlog.Fields{name: v})
}

// WithError implements pulsarlog.Logger.
func (l *errorLogger) WithError(err error) pulsarlog.Entry {
	return l.with(nil, err, l.inner.WithError(err))
}

func (l *errorLogger) Debug(args ...any)            { l.base().Debug(args...) }
func (l *errorLogger) Info(args ...any)             { l.base().Info(args...) }
func (l *errorLogger) Warn(args ...any)             { l.base().Warn(args...) }
func (l *errorLogger) Debugf(f string, args ...any) { l.base().Debugf(f, args...) }
func (l *errorLogger) Infof(f string, args ...any)  { l.base().Infof(f, args...) }
func (l *errorLogger) Warnf(f string, args ...any)  { l.base().Warnf(f, args...) }

func (l *errorLogger) Error(args ...any) {
	l.base().Error(args...)
	l.forward(fmt.Sprint(args...))
}

func (l *errorLogger) Errorf(f string, args ...any) {
	l.base().Errorf(f, args...)
	l.forward(fmt.Sprintf(f, args...))
}

var (
	_ pulsarlog.Logger = (*errorLogger)(nil)
	_ pulsarlog.Entry  = (*errorLogger)(nil)
)
