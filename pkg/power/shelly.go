package power

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// ShellyStatus is the part of a Shelly Gen2+ Switch.GetStatus answer used
// here: APower is the active power in W.
type ShellyStatus struct {
	APower *float64 `json:"apower"`
}

// ParseShellyStatus parses a Switch.GetStatus JSON answer.
func ParseShellyStatus(b []byte) (float64, error) {
	var st ShellyStatus
	if err := json.Unmarshal(b, &st); err != nil {
		return 0, fmt.Errorf("shelly status: %w: %w", ErrParse, err)
	}
	if st.APower == nil {
		return 0, fmt.Errorf("shelly status: no apower: %w", ErrParse)
	}
	return *st.APower, nil
}

// ShellySource reads a Shelly plug over HTTP (wall scope, ~1 s
// resolution). It is safe for concurrent use.
type ShellySource struct {
	url     string
	client  *http.Client
	timeout time.Duration
	name    string
}

// NewShellySource returns a source for the plug at addr (host[:port]);
// each read is bounded by timeout (zero means 500 ms).
func NewShellySource(addr string, client *http.Client, timeout time.Duration) *ShellySource {
	if client == nil {
		client = http.DefaultClient
	}
	if timeout <= 0 {
		timeout = 500 * time.Millisecond
	}
	return &ShellySource{url: "http://" + addr + "/rpc/Switch.GetStatus?id=0", client: client, timeout: timeout, name: "shelly " + addr}
}

// Info implements Source.
func (s *ShellySource) Info() Info {
	return Info{Name: s.name, Scope: ScopeWall, Method: Trapezoid, Resolution: time.Second, Paths: []string{s.url}}
}

// Read implements Source.
func (s *ShellySource) Read(ctx context.Context) (Reading, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return Reading{}, fmt.Errorf("%s: %w", s.name, err)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return Reading{}, fmt.Errorf("%s: %w", s.name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Reading{}, fmt.Errorf("%s: HTTP %s: %w", s.name, resp.Status, ErrUnavailable)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return Reading{}, fmt.Errorf("%s: %w", s.name, err)
	}
	w, err := ParseShellyStatus(b)
	if err != nil {
		return Reading{}, fmt.Errorf("%s: %w", s.name, err)
	}
	return Reading{PowerW: w}, nil
}

// Close implements Source; it has nothing to release.
func (s *ShellySource) Close() error { return nil }

// probeShelly adds a source per configured plug that answers once.
func probeShelly(ctx context.Context, opt ProbeOptions, p *Probed) {
	for _, addr := range opt.ShellyAddrs {
		s := NewShellySource(addr, opt.HTTPClient, opt.PlugTimeout)
		if _, err := s.Read(ctx); err != nil {
			p.unavailable(s.name, s.url, err.Error())
			continue
		}
		p.Sources = append(p.Sources, s)
	}
}
