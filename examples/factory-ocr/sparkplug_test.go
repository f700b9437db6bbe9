package main

import (
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/link"
	"github.com/edgeinfer/edgeinfer/pkg/link/mosquittotest"
)

// TestStationSparkplug checks the station's Sparkplug messages without
// the OCR models TestStation needs: the publisher's births on connection
// and the line's data, decoded by Tahu (checkSparkplug).
func TestStationSparkplug(t *testing.T) {
	broker := mosquittotest.Start(t, mosquittotest.Options{})
	dash, err := link.Open(t.Context(), link.Config{Broker: broker.URL(), Fleet: "plant-1", Device: "dashboard"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dash.Close()
	if err := dash.WaitConnected(t.Context()); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	if err := dash.Subscribe(t.Context(), "spBv1.0/plant-1/#", 0, func(m link.Message) {
		lines <- m.Topic + " " + hex.EncodeToString(m.Payload)
	}); err != nil {
		t.Fatal(err)
	}
	p, err := openPublisher(t.Context(), Config{Broker: broker.URL(), Fleet: "plant-1", Device: "ocr-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const n = 5
	sorted := []time.Duration{10 * time.Millisecond, 12 * time.Millisecond, 20 * time.Millisecond, 21 * time.Millisecond, 40 * time.Millisecond}
	if err := p.line(t.Context(), LineMetrics{Labels: n, P50MS: 20, P99MS: 40}, sorted); err != nil {
		t.Fatal(err)
	}
	var spb []string
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	for len(spb) == 0 || !strings.Contains(spb[len(spb)-1], "/DDATA/ocr-1/paddleocr ") {
		select {
		case l := <-lines:
			spb = append(spb, l)
		case <-timeout.C:
			t.Fatalf("no DDATA; got %d messages", len(spb))
		}
	}
	checkSparkplug(t, spb, n)
}
