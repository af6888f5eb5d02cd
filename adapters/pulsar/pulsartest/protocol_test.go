package pulsartest

import (
	"bufio"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// Raw-protocol tests: a hand-driven TCP peer checks the answers the Go
// client never provokes (refusals, negotiation, malformed input).

type rawPeer struct {
	t  *testing.T
	nc net.Conn
	r  *bufio.Reader
}

func dialRaw(t *testing.T) (*Broker, *rawPeer) {
	t.Helper()
	b, err := Start(WithLogf(t.Logf))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	nc, err := net.DialTimeout("tcp", strings.TrimPrefix(b.URL(), "pulsar://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	return b, &rawPeer{t: t, nc: nc, r: bufio.NewReader(nc)}
}

func (p *rawPeer) write(cmd, payload []byte) {
	p.t.Helper()
	if _, err := p.nc.Write(appendFrame(nil, cmd, payload)); err != nil {
		p.t.Fatalf("write: %v", err)
	}
}

// read returns the next command's type and its fields by number.
func (p *rawPeer) read() (cmdType, map[protowire.Number]field) {
	p.t.Helper()
	cmd, _, err := readFrame(p.r, 1<<20)
	if err != nil {
		p.t.Fatalf("read: %v", err)
	}
	bc, err := decodeBase(cmd)
	if err != nil {
		p.t.Fatalf("decode: %v", err)
	}
	fields := map[protowire.Number]field{}
	if err := walk(bc.body, func(f field) error { fields[f.num] = f; return nil }); err != nil {
		p.t.Fatalf("decode body: %v", err)
	}
	return bc.typ, fields
}

func (p *rawPeer) connect(version int32) map[protowire.Number]field {
	p.t.Helper()
	p.write(baseCommand(cmdConnect, func(e *enc) {
		e.string(1, "raw-test")
		e.int32(4, version)
	}), nil)
	typ, f := p.read()
	if typ != cmdConnected {
		p.t.Fatalf("CONNECT answered with command %d", typ)
	}
	return f
}

func TestConnectNegotiatesProtocolVersion(t *testing.T) {
	for _, tc := range []struct{ client, want int32 }{{30, maxProtocolVersion}, {20, 20}, {12, 12}} {
		_, p := dialRaw(t)
		f := p.connect(tc.client)
		if got := f[2].i32(); got != tc.want {
			t.Errorf("client version %d: broker answered %d, want %d", tc.client, got, tc.want)
		}
		if f[1].str() != serverVersion || f[3].i32() != defaultMaxMessageSize {
			t.Errorf("CONNECTED server %q max size %d", f[1].str(), f[3].i32())
		}
	}
}

func TestCommandBeforeConnectClosesConnection(t *testing.T) {
	_, p := dialRaw(t)
	p.write(pingCmd(), nil)
	if _, _, err := readFrame(p.r, 1<<20); !errors.Is(err, io.EOF) {
		t.Fatalf("read after PING before CONNECT: %v, want EOF", err)
	}
}

func TestPingIsAnsweredWithPong(t *testing.T) {
	_, p := dialRaw(t)
	p.connect(20)
	p.write(pingCmd(), nil)
	if typ, _ := p.read(); typ != cmdPong {
		t.Fatalf("PING answered with command %d", typ)
	}
}

func TestUnsupportedRequestGetsError(t *testing.T) {
	_, p := dialRaw(t)
	p.connect(20)
	// SEEK (request_id in field 2) is not implemented.
	p.write(baseCommand(cmdSeek, func(e *enc) {
		e.varint(1, 1)
		e.varint(2, 77)
	}), nil)
	typ, f := p.read()
	if typ != cmdError || f[1].v != 77 || serverError(f[2].v) != errNotAllowed {
		t.Fatalf("SEEK answered with command %d fields %+v, want ERROR for request 77", typ, f)
	}
	if !strings.Contains(f[3].str(), "not supported") {
		t.Fatalf("error message %q", f[3].str())
	}
}

func TestNonPersistentLookupSucceeds(t *testing.T) {
	_, p := dialRaw(t)
	p.connect(20)
	p.write(baseCommand(cmdLookup, func(e *enc) {
		e.string(1, "non-persistent://public/default/x")
		e.varint(2, 5)
	}), nil)
	typ, f := p.read()
	if typ != cmdLookupResponse || f[4].v != 5 || f[3].v == 2 {
		t.Fatalf("lookup answered with command %d fields %+v, want a Connect response for request 5", typ, f)
	}
}

func TestChecksumMismatchGetsSendError(t *testing.T) {
	b, p := dialRaw(t)
	p.connect(20)
	p.write(baseCommand(cmdProducer, func(e *enc) {
		e.string(1, "raw")
		e.varint(2, 1) // producer id
		e.varint(3, 2) // request id
	}), nil)
	if typ, _ := p.read(); typ != cmdProducerSuccess {
		t.Fatalf("PRODUCER answered with command %d", typ)
	}
	payload := testPayload(t, "hi")
	payload[len(payload)-1] ^= 0xff // corrupt after the checksum was computed
	p.write(baseCommand(cmdSend, func(e *enc) {
		e.varint(1, 1)
		e.varint(2, 0)
	}), payload)
	typ, f := p.read()
	if typ != cmdSendError || serverError(f[3].v) != errChecksum {
		t.Fatalf("corrupt SEND answered with command %d fields %+v, want SEND_ERROR ChecksumError", typ, f)
	}
	if st, _ := b.Topic("raw"); st.Entries != 0 {
		t.Fatalf("corrupt message stored: %+v", st)
	}
}

// UNSUBSCRIBE is driven raw: pulsar-client-go v0.19.0 leaves a consumer's
// goroutines running after Consumer.Unsubscribe (its Close then returns
// early), which the leak check would blame on this package.
func TestUnsubscribeDeletesSubscription(t *testing.T) {
	b, p := dialRaw(t)
	p.connect(20)
	p.write(baseCommand(cmdSubscribe, func(e *enc) {
		e.string(1, "unsub")
		e.string(2, "gone")
		e.int32(3, subShared)
		e.varint(4, 9) // consumer id
		e.varint(5, 1) // request id
	}), nil)
	if typ, f := p.read(); typ != cmdSuccess || f[1].v != 1 {
		t.Fatalf("SUBSCRIBE answered with command %d %+v", typ, f)
	}
	if _, ok := b.Subscription("unsub", "gone"); !ok {
		t.Fatal("subscription not created")
	}
	p.write(baseCommand(cmdUnsubscribe, func(e *enc) {
		e.varint(1, 9)
		e.varint(2, 2)
	}), nil)
	if typ, f := p.read(); typ != cmdSuccess || f[1].v != 2 {
		t.Fatalf("UNSUBSCRIBE answered with command %d %+v", typ, f)
	}
	if _, ok := b.Subscription("unsub", "gone"); ok {
		t.Fatal("subscription still exists after UNSUBSCRIBE")
	}
}

// testPayload builds a checksummed payload section with minimal metadata.
func testPayload(t *testing.T, body string) []byte {
	t.Helper()
	var md enc
	md.string(1, "raw")
	md.varint(2, 0)
	md.varint(3, uint64(time.Now().UnixMilli()))
	sec := binary.BigEndian.AppendUint32(nil, uint32(len(md.b)))
	sec = append(sec, md.b...)
	sec = append(sec, body...)
	out := binary.BigEndian.AppendUint16(nil, magicCRC32C)
	out = binary.BigEndian.AppendUint32(out, crc32.Checksum(sec, castagnoli))
	return append(out, sec...)
}

func FuzzDecodeBase(f *testing.F) {
	f.Add(pingCmd())
	f.Add(errorCmd(1, errNotAllowed, "x"))
	f.Add(messageCmd(3, messageID{ledger: 1, entry: 2, partition: -1, batchIndex: -1}, 4, []int64{5, -1}))
	f.Fuzz(func(t *testing.T, b []byte) {
		bc, err := decodeBase(b)
		if err != nil {
			return
		}
		// Every decoder must reject or accept, never panic.
		_, _ = decodeSubscribe(bc.body)
		_, _ = decodeAck(bc.body)
		_, _ = decodeSend(bc.body)
		_, _ = decodeProducer(bc.body)
		_, _ = decodeRedeliver(bc.body)
		_, _ = decodeConnect(bc.body)
	})
}

func FuzzParsePayload(f *testing.F) {
	f.Add([]byte{0x0e, 0x01, 0, 0, 0, 0})
	f.Add([]byte{0, 0, 0, 2, 0x08, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		data, md, err := parsePayload(b)
		if err == nil && (len(data) < 10 || md.numMessages < 1) {
			t.Fatalf("accepted %x as %d bytes with %d messages", b, len(data), md.numMessages)
		}
	})
}

func FuzzReadFrame(f *testing.F) {
	f.Add(appendFrame(nil, pingCmd(), nil))
	f.Add([]byte{0, 0, 0, 3, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		cmd, payload, err := readFrame(bufio.NewReader(strings.NewReader(string(b))), 1<<16)
		if err == nil && len(cmd)+len(payload)+8 > len(b) {
			t.Fatalf("frame of %d+%d bytes from %d input bytes", len(cmd), len(payload), len(b))
		}
	})
}
