package pulsar

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	pulsarauth "github.com/apache/pulsar-client-go/pulsar/auth"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/ports"
)

// checkBroker checks that the broker at addr accepts the client
// configuration o: its TLS and its authentication's CONNECT (see
// handshake).
func checkBroker(ctx context.Context, o Options, addr string, timeout time.Duration) error {
	var creds credentials
	if p, ok := o.Authentication.(pulsarauth.Provider); ok {
		data, err := p.GetData()
		if err != nil {
			return connectError(ports.ErrAuth, addr, fmt.Errorf("%w: the %s authentication has no credentials to send: %v", adapters.ErrAuth, p.Name(), err))
		}
		creds = credentials{method: p.Name(), data: data}
	}
	var tlsConf *tls.Config
	if o.TLS != nil {
		tlsConf = o.TLS.Clone()
		if tlsConf.ServerName == "" {
			host, _, _ := net.SplitHostPort(addr)
			tlsConf.ServerName = host
		}
	}
	return handshake(ctx, addr, tlsConf, creds, timeout)
}

// Binary-protocol numbers the handshake uses (the public PulsarApi.proto).
const (
	cmdConnect       = 2  // BaseCommand.Type CONNECT, field connect = 2
	cmdConnected     = 3  // CONNECTED
	cmdError         = 14 // ERROR, field error = 14
	cmdAuthChallenge = 36 // AUTH_CHALLENGE

	serverAuthenticationError = 3
	serverAuthorizationError  = 4

	handshakeProtocolVersion = 20
)

// credentials are what CONNECT carries: the auth method's name and data.
type credentials struct {
	method string // "" for none
	data   []byte
}

// handshake connects to addr within timeout (or until ctx ends), over TLS
// when tlsConf is not nil, and performs the binary protocol's CONNECT with
// creds, as the client does before anything else. It fails with a
// *ports.BrokerError: ErrRefused, ErrTimeout or ErrUnreachable when
// nothing answers, ErrTLS saying why the TLS handshake failed, ErrAuth
// when the broker refuses the credentials; the connection is closed in
// every case.
func handshake(ctx context.Context, addr string, tlsConf *tls.Config, creds credentials, timeout time.Duration) error {
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	nc, err := (&net.Dialer{}).DialContext(dctx, "tcp", addr)
	if err != nil {
		code := ports.ErrUnreachable
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			code = ports.ErrRefused
		case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
			code, err = ports.ErrTimeout, fmt.Errorf("no connection within the connect timeout %v", timeout)
		}
		return connectError(code, addr, err)
	}
	defer nc.Close()
	deadline, _ := dctx.Deadline()
	_ = nc.SetDeadline(deadline)
	stop := context.AfterFunc(dctx, func() { _ = nc.SetDeadline(time.Now()) })
	defer stop()

	if tlsConf != nil {
		tc := tls.Client(nc, tlsConf)
		if err := tc.HandshakeContext(dctx); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return connectError(ports.ErrTLS, addr, adapters.ExplainTLS(addr, timedOut(err, timeout)))
		}
		nc = tc
	}
	if _, err := nc.Write(connectFrame(creds)); err != nil {
		return connectError(ports.ErrUnreachable, addr, fmt.Errorf("send CONNECT: %w", timedOut(err, timeout)))
	}
	typ, body, err := readCommand(nc)
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil && tlsConf == nil && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, errNotPulsar)):
		return connectError(ports.ErrUnreachable, addr, adapters.NotPlaintext(addr, "the Pulsar binary protocol", "pulsar+ssl", err))
	case err != nil:
		return connectError(ports.ErrTimeout, addr, fmt.Errorf("no answer to CONNECT: %w", timedOut(err, timeout)))
	}
	switch typ {
	case cmdConnected, cmdAuthChallenge:
		return nil
	case cmdError:
		ints, bufs, _ := decode(body) // CommandError: error code 2, message 3
		code, msg := ints[2], string(bufs[3])
		method := creds.method
		if method == "" {
			method = "none"
		}
		if code == serverAuthenticationError || code == serverAuthorizationError {
			return connectError(ports.ErrAuth, addr, fmt.Errorf("%w: the broker refused the %s authentication: %s; check the credentials (token, token_file/token_env, the client certificate or user and password) and the role's permissions", adapters.ErrAuth, method, msg))
		}
		return connectError(nil, addr, fmt.Errorf("the broker refused CONNECT (server error %d): %s", code, msg))
	default:
		return connectError(nil, addr, fmt.Errorf("the broker answered CONNECT with command %d, not CONNECTED", typ))
	}
}

// connectError is a failed open check of the broker at addr.
func connectError(code error, addr string, err error) error {
	if code != ports.ErrAuth && code != ports.ErrTLS {
		err = fmt.Errorf("%w; check that a Pulsar broker listens at that address (host and binary-protocol port: 6650 by default, 6651 for pulsar+ssl://) and that it is reachable from here", err)
	}
	return &ports.BrokerError{Op: "pulsar: connect to " + addr, Code: code, Retryable: code != ports.ErrAuth && code != ports.ErrTLS, Err: err}
}

// errNotPulsar marks an answer that cannot be a Pulsar frame.
var errNotPulsar = errors.New("not a Pulsar frame")

// timedOut replaces a deadline error with one naming the connect timeout.
func timedOut(err error, timeout time.Duration) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("no answer within the connect timeout %v (%w)", timeout, err)
	}
	return err
}

// connectFrame encodes BaseCommand{type: CONNECT, connect: {...}} as a
// frame: total size, command size, command.
func connectFrame(c credentials) []byte {
	var connect []byte
	connect = protowire.AppendTag(connect, 1, protowire.BytesType) // client_version
	connect = protowire.AppendString(connect, "sluice-open-check")
	if c.data != nil {
		connect = protowire.AppendTag(connect, 3, protowire.BytesType) // auth_data
		connect = protowire.AppendBytes(connect, c.data)
	}
	connect = protowire.AppendTag(connect, 4, protowire.VarintType) // protocol_version
	connect = protowire.AppendVarint(connect, handshakeProtocolVersion)
	if c.method != "" {
		connect = protowire.AppendTag(connect, 5, protowire.BytesType) // auth_method_name
		connect = protowire.AppendString(connect, c.method)
	}
	var base []byte
	base = protowire.AppendTag(base, 1, protowire.VarintType)
	base = protowire.AppendVarint(base, cmdConnect)
	base = protowire.AppendTag(base, cmdConnect, protowire.BytesType)
	base = protowire.AppendBytes(base, connect)
	frame := make([]byte, 8, 8+len(base))
	binary.BigEndian.PutUint32(frame[0:], uint32(4+len(base)))
	binary.BigEndian.PutUint32(frame[4:], uint32(len(base)))
	return append(frame, base...)
}

// maxAnswer bounds the answer to CONNECT (CONNECTED or ERROR are small).
const maxAnswer = 1 << 20

// readCommand reads one frame and returns its command type and the body of
// the command's own field.
func readCommand(r io.Reader) (typ uint64, body []byte, err error) {
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	total, size := binary.BigEndian.Uint32(hdr[0:]), binary.BigEndian.Uint32(hdr[4:])
	if total > maxAnswer || size+4 > total || size == 0 {
		return 0, nil, fmt.Errorf("%w (sizes %d/%d)", errNotPulsar, total, size)
	}
	buf := make([]byte, total-4)
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, nil, err
	}
	ints, bufs, err := decode(buf[:size])
	if err == nil && ints[1] == 0 {
		err = fmt.Errorf("%w: no command type", errNotPulsar)
	}
	return ints[1], bufs[protowire.Number(ints[1])], err
}

// decode returns the varint and the bytes fields of a protobuf message.
func decode(b []byte) (ints map[protowire.Number]uint64, bufs map[protowire.Number][]byte, err error) {
	ints, bufs = map[protowire.Number]uint64{}, map[protowire.Number][]byte{}
	for len(b) > 0 {
		num, wt, n := protowire.ConsumeTag(b)
		if n >= 0 {
			b = b[n:]
			switch wt {
			case protowire.VarintType:
				ints[num], n = protowire.ConsumeVarint(b)
			case protowire.BytesType:
				bufs[num], n = protowire.ConsumeBytes(b)
			default:
				n = protowire.ConsumeFieldValue(num, wt, b)
			}
		}
		if n < 0 {
			return ints, bufs, fmt.Errorf("%w: %v", errNotPulsar, protowire.ParseError(n))
		}
		b = b[n:]
	}
	return ints, bufs, nil
}
