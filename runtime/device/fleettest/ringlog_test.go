package fleettest

import (
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestRingLogKeepsTheLatest(t *testing.T) {
	var r ringLog
	log := slog.New(slog.NewTextHandler(&r, nil)).With("device", "dev-1")
	log.Debug("not kept")
	for i := range ringLen + 3 {
		log.Info("check", "n", i)
	}
	got := r.recent()
	if len(got) != ringLen {
		t.Fatalf("kept %d records, want %d: %q", len(got), ringLen, got)
	}
	var ns []int
	for _, l := range got {
		if !strings.Contains(l, "level=INFO msg=check device=dev-1 n=") {
			t.Fatalf("record %q lacks its level, message or attributes", l)
		}
		n, _ := strconv.Atoi(l[strings.LastIndex(l, "=")+1:])
		ns = append(ns, n)
	}
	if want := []int{3, 4, 5, 6, 7, 8, 9, 10}; !slices.Equal(ns, want) {
		t.Fatalf("kept records %v, want the latest oldest first %v", ns, want)
	}
}
