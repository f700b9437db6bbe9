package power

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/power/powertest"
)

func TestParseShellyStatus(t *testing.T) {
	cases := []struct {
		in   string
		want float64
		err  bool
	}{
		{`{"id":0,"source":"init","output":true,"apower":8.9,"voltage":237.5,"current":0.068,"aenergy":{"total":6.532}}`, 8.9, false},
		{`{"apower":0}`, 0, false},
		{`{"voltage":230}`, 0, true},
		{`{"apower":"x"}`, 0, true},
		{`not json`, 0, true},
	}
	for _, c := range cases {
		got, err := ParseShellyStatus([]byte(c.in))
		if (err != nil) != c.err || got != c.want {
			t.Errorf("%s: %g, %v", c.in, got, err)
		}
		if err != nil && !errors.Is(err, ErrParse) {
			t.Errorf("%s: error %v is not ErrParse", c.in, err)
		}
	}
}

func TestParseTasmotaSensor(t *testing.T) {
	cases := []struct {
		in   string
		want float64
		err  bool
	}{
		{`{"Time":"2026-01-01T10:00:00","ENERGY":{"TotalStartTime":"2025-01-01T00:00:00","Total":12.345,"Yesterday":0.5,"Today":0.1,"Period":1,"Power":42,"ApparentPower":50,"ReactivePower":27,"Factor":0.84,"Voltage":231,"Current":0.216}}`, 42, false},
		{`{"Time":"x","ENERGY":{"Voltage":231}}`, 0, true},
		{`{"Time":"x"}`, 0, true},
		{`[`, 0, true},
	}
	for _, c := range cases {
		got, err := ParseTasmotaSensor([]byte(c.in))
		if (err != nil) != c.err || got != c.want {
			t.Errorf("%s: %g, %v", c.in, got, err)
		}
	}
}

func FuzzParseShellyStatus(f *testing.F) {
	f.Add([]byte(`{"apower":8.9}`))
	f.Add([]byte(`{"apower":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := ParseShellyStatus(b); err != nil && !errors.Is(err, ErrParse) {
			t.Fatalf("error %v is not ErrParse", err)
		}
	})
}

func FuzzParseTasmotaSensor(f *testing.F) {
	f.Add([]byte(`{"ENERGY":{"Power":42}}`))
	f.Add([]byte(`{"ENERGY":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := ParseTasmotaSensor(b); err != nil && !errors.Is(err, ErrParse) {
			t.Fatalf("error %v is not ErrParse", err)
		}
	})
}

func TestShellySource(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/rpc/Switch.GetStatus" || r.URL.Query().Get("id") != "0" {
			http.NotFound(w, r)
			return
		}
		select {
		case <-block:
			<-r.Context().Done() // a plug that stops answering
			return
		default:
		}
		w.Write([]byte(`{"id":0,"apower":12.5}`))
	}))
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	if host, _, _ := net.SplitHostPort(addr); host != "127.0.0.1" {
		t.Fatalf("test server on %s", addr)
	}
	// The plug timeout must fit a slow runner (qemu-user emulates the HTTP
	// round trip) yet bound a hung plug's read, checked below.
	const plugTimeout = 2 * time.Second
	p := Probe(t.Context(), powertest.NewFS(map[string]string{}), ProbeOptions{ShellyAddrs: []string{addr, "127.0.0.1:1"}, PlugTimeout: plugTimeout})
	if len(p.Sources) != 1 || p.Sources[0].Info().Scope != ScopeWall {
		t.Fatalf("sources %v unavailable %+v", p.Sources, p.Unavailable)
	}
	found := false
	for _, u := range p.Unavailable {
		found = found || u.Source == "shelly 127.0.0.1:1" && strings.Contains(u.Reason, "refused")
	}
	if !found {
		t.Fatalf("dead plug not listed: %+v", p.Unavailable)
	}
	src := p.Sources[0]
	r, err := src.Read(t.Context())
	if err != nil || r.PowerW != 12.5 {
		t.Fatalf("read %v %v", r, err)
	}
	close(block)
	start := time.Now()
	if _, err := src.Read(t.Context()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hung plug: %v", err)
	}
	if d := time.Since(start); d < plugTimeout || d > plugTimeout+time.Second {
		t.Fatalf("a hung plug's read took %v, want about the %v timeout", d, plugTimeout)
	}
}

func TestTasmotaSource(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewTasmotaSource("plug1", 3*time.Second)
		if _, err := s.Read(t.Context()); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("before any message: %v", err)
		}
		if err := s.Feed([]byte(`{"ENERGY":{"Power":7.5}}`), time.Now()); err != nil {
			t.Fatal(err)
		}
		if err := s.Feed([]byte(`{}`), time.Now()); !errors.Is(err, ErrParse) {
			t.Fatalf("bad payload: %v", err)
		}
		r, err := s.Read(t.Context())
		if err != nil || r.PowerW != 7.5 || r.At.IsZero() {
			t.Fatalf("read %+v %v", r, err)
		}
		time.Sleep(4 * time.Second)
		if _, err := s.Read(t.Context()); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("stale message: %v", err)
		}
	})
}
