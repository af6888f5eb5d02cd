package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sluicemq/sluice/ports"
)

const (
	devices           = 10
	readingsPerDevice = 20
)

// fleet is what the simulated devices publish, and what should become of it.
type fleet struct {
	msgs       []ports.Message
	readings   int // distinct readings
	duplicates int // readings sent a second time with the same message id
	unknown    int // unknown schema version
	malformed  int // not JSON
	invalid    int // valid JSON, invalid reading
}

// simulate builds the devices' messages: every device sends 20 readings,
// even devices in schema v1 (temperature), odd ones in schema v2
// (humidity, co2). A few are bad, and a few are sent twice with the same
// message id, as a device does when it lost the confirm of its first
// attempt.
func simulate(topic ports.Topic) fleet {
	var f fleet
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range devices * readingsPerDevice {
		dev := fmt.Sprintf("d-%02d", i%devices)
		at := base.Add(time.Duration(i) * time.Minute)
		var body any
		switch d := i % devices; {
		case d%2 == 0:
			body = map[string]any{"schema": 1, "device": dev, "temp_c": 18 + float64(i%7), "at": at.Unix()}
		case (i/devices)%2 == 0:
			body = map[string]any{"schema": 2, "device": dev, "point": "humidity", "value": 40 + float64(i%11), "unit": "%", "at": at.Format(time.RFC3339)}
		default:
			body = map[string]any{"schema": 2, "device": dev, "point": "co2", "value": 400 + float64(i%50), "unit": "ppm", "at": at.Format(time.RFC3339)}
		}
		payload, _ := json.Marshal(body)
		switch i {
		case 17, 83, 151:
			payload = []byte(fmt.Sprintf(`{"schema":9,"device":%q,"reading":[1,2,3]}`, dev))
			f.unknown++
		case 42, 120:
			payload = payload[:len(payload)/2] // truncated on the wire
			f.malformed++
		case 99:
			payload = []byte(fmt.Sprintf(`{"schema":2,"device":"","point":"co2","value":410,"unit":"ppm","at":%q}`, at.Format(time.RFC3339)))
			f.invalid++
		default:
			f.readings++
		}
		m := ports.Message{Topic: topic, Key: dev, Payload: payload, Headers: ports.NewHeaders(
			ports.HeaderID, fmt.Sprintf("reading-%03d", i),
			ports.HeaderType, "com.example.iot.reading",
			ports.HeaderContentType, "application/json",
			ports.HeaderSource, "devices/"+dev,
		)}
		f.msgs = append(f.msgs, m)
		if i%25 == 0 {
			f.msgs = append(f.msgs, m) // the retry after a lost confirm: same message id
			f.duplicates++
		}
	}
	return f
}

func (f fleet) poison() int { return f.unknown + f.malformed + f.invalid }

// publish sends the fleet's messages in chunks, each chunk with confirms.
func (f fleet) publish(ctx context.Context, s ports.Sender) error {
	for start := 0; start < len(f.msgs); start += 50 {
		end := min(start+50, len(f.msgs))
		if err := s.Send(ctx, f.msgs[start:end]...); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
	}
	return nil
}
