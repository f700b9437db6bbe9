package power

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"
)

// TasmotaSensor is the part of a Tasmota tele/<topic>/SENSOR payload used
// here: ENERGY.Power in W, and the device's own local timestamp.
type TasmotaSensor struct {
	Time   string `json:"Time"`
	Energy *struct {
		Power *float64 `json:"Power"`
	} `json:"ENERGY"`
}

// ParseTasmotaSensor returns ENERGY.Power (W) from a SENSOR payload.
func ParseTasmotaSensor(b []byte) (float64, error) {
	var s TasmotaSensor
	if err := json.Unmarshal(b, &s); err != nil {
		return 0, fmt.Errorf("tasmota sensor: %w: %w", ErrParse, err)
	}
	if s.Energy == nil || s.Energy.Power == nil {
		return 0, fmt.Errorf("tasmota sensor: no ENERGY.Power: %w", ErrParse)
	}
	return *s.Energy.Power, nil
}

// TasmotaSource is a wall-scope source fed with SENSOR payloads (by an
// MQTT subscription, or any func). Read returns the latest power with the
// time it was received; a reading older than MaxAge is unavailable. It is
// safe for concurrent use: Feed may be called from an MQTT handler.
type TasmotaSource struct {
	topic  string
	maxAge time.Duration
	mu     struct {
		sync.Mutex
		w  float64
		at time.Time
		ok bool
	}
}

// NewTasmotaSource returns a source for tele/<topic>/SENSOR. maxAge bounds
// how old the latest message may be (zero means 3 s: Tasmota must be set
// to a short TelePeriod for energy measurement).
func NewTasmotaSource(topic string, maxAge time.Duration) *TasmotaSource {
	if maxAge <= 0 {
		maxAge = 3 * time.Second
	}
	return &TasmotaSource{topic: topic, maxAge: maxAge}
}

// Feed parses one SENSOR payload received at at. It never blocks.
func (s *TasmotaSource) Feed(payload []byte, at time.Time) error {
	w, err := ParseTasmotaSensor(payload)
	if err != nil {
		return fmt.Errorf("tele/%s/SENSOR: %w", s.topic, err)
	}
	s.mu.Lock()
	s.mu.w, s.mu.at, s.mu.ok = w, at, true
	s.mu.Unlock()
	return nil
}

// Info implements Source.
func (s *TasmotaSource) Info() Info {
	return Info{Name: "tasmota " + s.topic, Scope: ScopeWall, Method: Trapezoid, Resolution: time.Second,
		Paths: []string{"tele/" + s.topic + "/SENSOR"}}
}

// Read implements Source: the latest fed value, stamped with its arrival.
func (s *TasmotaSource) Read(context.Context) (Reading, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.mu.ok {
		return Reading{}, fmt.Errorf("tasmota %s: no message yet: %w", s.topic, ErrUnavailable)
	}
	if age := time.Since(s.mu.at); age > s.maxAge {
		return Reading{}, fmt.Errorf("tasmota %s: last message %v old: %w", s.topic, age.Round(time.Millisecond), ErrUnavailable)
	}
	return Reading{At: s.mu.at, PowerW: s.mu.w}, nil
}

// Close implements Source; it has nothing to release.
func (s *TasmotaSource) Close() error { return nil }
