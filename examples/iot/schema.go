package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
)

// Point is one point value, whatever schema version it arrived in.
type Point struct {
	Device string
	Point  string // "temperature", "humidity", ...
	Value  float64
	Unit   string
	At     time.Time
}

// Readings are published in two schema versions:
//
//	v1: {"schema":1,"device":"d-01","temp_c":21.5,"at":1700000000}
//	v2: {"schema":2,"device":"d-01","point":"humidity","value":40,"unit":"%","at":"2023-11-14T22:13:20Z"}
type readingV1 struct {
	Device string   `json:"device"`
	TempC  *float64 `json:"temp_c"`
	At     int64    `json:"at"`
}

type readingV2 struct {
	Device string   `json:"device"`
	Point  string   `json:"point"`
	Value  *float64 `json:"value"`
	Unit   string   `json:"unit"`
	At     string   `json:"at"`
}

var knownPoints = map[string]string{"temperature": "C", "humidity": "%", "co2": "ppm"}

// decodePoint decodes and validates a schema-versioned reading. Used with
// flow.DecodeWith, every error it returns is poison: the reading is
// dead-lettered with the reason and never retried.
func decodePoint(payload []byte, p *Point) error {
	var head struct {
		Schema int `json:"schema"`
	}
	if err := json.Unmarshal(payload, &head); err != nil {
		return fmt.Errorf("malformed JSON: %w", err)
	}
	switch head.Schema {
	case 1:
		var r readingV1
		if err := json.Unmarshal(payload, &r); err != nil {
			return fmt.Errorf("schema v1: %w", err)
		}
		if r.TempC == nil {
			return errors.New("schema v1: temp_c is missing")
		}
		*p = Point{Device: r.Device, Point: "temperature", Value: *r.TempC, Unit: "C", At: time.Unix(r.At, 0).UTC()}
	case 2:
		var r readingV2
		if err := json.Unmarshal(payload, &r); err != nil {
			return fmt.Errorf("schema v2: %w", err)
		}
		if r.Value == nil {
			return errors.New("schema v2: value is missing")
		}
		at, err := time.Parse(time.RFC3339, r.At)
		if err != nil {
			return fmt.Errorf("schema v2: at: %w", err)
		}
		*p = Point{Device: r.Device, Point: r.Point, Value: *r.Value, Unit: r.Unit, At: at}
	default:
		return fmt.Errorf("unknown schema version %d", head.Schema)
	}
	return p.validate()
}

func (p *Point) validate() error {
	unit, ok := knownPoints[p.Point]
	switch {
	case p.Device == "":
		return errors.New("device is missing")
	case !ok:
		return fmt.Errorf("unknown point %q", p.Point)
	case p.Unit != unit:
		return fmt.Errorf("point %s: unit %q, want %q", p.Point, p.Unit, unit)
	case math.IsNaN(p.Value) || math.IsInf(p.Value, 0):
		return errors.New("value is not a number")
	case p.At.IsZero() || p.At.Year() < 2000:
		return errors.New("timestamp is missing")
	}
	return nil
}
