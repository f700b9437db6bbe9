package main

// Helpers shared by the subcommands, in a file of their own without build
// constraints: a CGO_ENABLED=0 build (the fleet-side commands only, see
// nocgo.go) needs them as much as the full one.

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// multiFlag collects a repeatable flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }

// splitList splits a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// parseBytes reads a size: bytes, or a number with a unit (KiB, MiB,
// GiB, KB, MB, GB; "768MiB", "1.5GiB").
func parseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	num := strings.TrimRightFunc(s, func(r rune) bool { return r >= 'A' && r <= 'z' })
	unit := strings.TrimSpace(s[len(num):])
	mult, ok := map[string]float64{"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "KB": 1e3, "MB": 1e6, "GB": 1e9}[unit]
	v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if !ok || err != nil || v < 0 || v*mult > math.MaxInt64/2 {
		return 0, fmt.Errorf("%q: want bytes, or a number with KiB, MiB, GiB, KB, MB or GB", s)
	}
	return int64(v * mult), nil
}
