package pulsartest

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// Frame layout (all sizes big-endian uint32):
//
//	[TOTAL_SIZE][CMD_SIZE][CMD]                                   simple command
//	[TOTAL_SIZE][CMD_SIZE][CMD][MAGIC][CRC32C][META_SIZE][META][PAYLOAD]   with payload
//
// TOTAL_SIZE counts everything after itself. MAGIC is 0x0e01 and CRC32C
// (Castagnoli) covers META_SIZE, META and PAYLOAD. The broker stores the
// payload section of a SEND whole and replays it after a MESSAGE command.

const (
	magicCRC32C    uint16 = 0x0e01
	magicBrokerMD  uint16 = 0x0e02
	framePadding          = 10 * 1024
	minFrameLength        = 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errFrame marks a frame that breaks the framing rules; the connection that
// sent it is closed.
var errFrame = errors.New("pulsartest: bad frame")

// readFrame reads one frame. payload is nil for a simple command. Both
// slices are freshly allocated and owned by the caller.
func readFrame(r *bufio.Reader, maxFrame uint32) (cmd, payload []byte, err error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, nil, err
	}
	total := binary.BigEndian.Uint32(hdr[:])
	if total < minFrameLength || total > maxFrame {
		return nil, nil, fmt.Errorf("%w: frame size %d (limit %d)", errFrame, total, maxFrame)
	}
	buf := make([]byte, total)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, nil, err
	}
	cmdSize := binary.BigEndian.Uint32(buf)
	if uint64(cmdSize)+4 > uint64(total) {
		return nil, nil, fmt.Errorf("%w: command size %d exceeds frame size %d", errFrame, cmdSize, total)
	}
	cmd = buf[4 : 4+cmdSize]
	if rest := buf[4+cmdSize:]; len(rest) > 0 {
		payload = rest
	}
	return cmd, payload, nil
}

// appendFrame appends a frame holding cmd and, when non-nil, the payload
// section to dst.
func appendFrame(dst, cmd, payload []byte) []byte {
	total := 4 + len(cmd) + len(payload)
	dst = binary.BigEndian.AppendUint32(dst, uint32(total))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(cmd)))
	dst = append(dst, cmd...)
	return append(dst, payload...)
}

// metadata is the part of MessageMetadata the broker acts on.
type metadata struct {
	producerName string
	sequenceID   uint64
	publishTime  uint64
	partitionKey string
	properties   []keyValue
	// numMessages is num_messages_in_batch; 1 when the field is absent.
	numMessages int32
	batched     bool
	// deliverAtTime is deliver_at_time in Unix milliseconds, 0 if absent.
	deliverAtTime int64
	// The chunk fields (num_chunks_from_msg > 1 marks a chunk): stored and
	// dispatched untouched, as Apache Pulsar does; the consumer reassembles.
	uuid          string
	numChunks     int32
	totalChunkLen int32
	chunkID       int32
}

// parsePayload checks the payload section of a SEND and returns it in the
// checksummed form the broker stores and dispatches (a section sent without
// magic and checksum gets them added), with its decoded metadata.
func parsePayload(p []byte) ([]byte, metadata, error) {
	var md metadata
	if len(p) >= 2 && binary.BigEndian.Uint16(p) == magicBrokerMD {
		return nil, md, fmt.Errorf("%w: broker entry metadata in a SEND", errFrame)
	}
	var body []byte
	if len(p) >= 6 && binary.BigEndian.Uint16(p) == magicCRC32C {
		body = p[6:]
		want := binary.BigEndian.Uint32(p[2:])
		if got := crc32.Checksum(body, castagnoli); got != want {
			return nil, md, fmt.Errorf("%w: checksum 0x%08x, computed 0x%08x", errChecksumMismatch, want, got)
		}
	} else {
		body = p
		sum := crc32.Checksum(body, castagnoli)
		p = binary.BigEndian.AppendUint16(nil, magicCRC32C)
		p = binary.BigEndian.AppendUint32(p, sum)
		p = append(p, body...)
	}
	if len(body) < 4 {
		return nil, md, fmt.Errorf("%w: payload section of %d bytes", errFrame, len(body))
	}
	size := binary.BigEndian.Uint32(body)
	if uint64(size)+4 > uint64(len(body)) {
		return nil, md, fmt.Errorf("%w: metadata size %d exceeds section", errFrame, size)
	}
	md, err := decodeMetadata(body[4 : 4+size])
	if err != nil {
		return nil, md, err
	}
	return p, md, nil
}

// errChecksumMismatch marks a payload whose CRC32C does not match.
var errChecksumMismatch = errors.New("pulsartest: checksum mismatch")

func decodeMetadata(b []byte) (metadata, error) {
	md := metadata{numMessages: 1}
	err := walk(b, func(f field) error {
		switch f.num {
		case 1:
			md.producerName = f.str()
		case 2:
			md.sequenceID = f.v
		case 3:
			md.publishTime = f.v
		case 4:
			kv, err := decodeKeyValue(f.data)
			if err != nil {
				return err
			}
			md.properties = append(md.properties, kv)
		case 6:
			md.partitionKey = f.str()
		case 11:
			md.numMessages, md.batched = f.i32(), true
		case 19:
			md.deliverAtTime = int64(f.v)
		case 26:
			md.uuid = f.str()
		case 27:
			md.numChunks = f.i32()
		case 28:
			md.totalChunkLen = f.i32()
		case 29:
			md.chunkID = f.i32()
		}
		return nil
	})
	if err == nil && md.numMessages < 1 {
		err = fmt.Errorf("%w: num_messages_in_batch %d", errMalformed, md.numMessages)
	}
	return md, err
}
