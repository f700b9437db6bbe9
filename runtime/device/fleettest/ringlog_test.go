package fleettest

import (
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestLogKeeperKeepsTheLatest(t *testing.T) {
	r := LogKeeper{Tail: deviceLogLen}
	log := slog.New(slog.NewTextHandler(&r, nil)).With("device", "dev-1")
	log.Debug("not kept")
	for i := range deviceLogLen + 3 {
		log.Info("check", "n", i)
	}
	got := r.Lines()
	if len(got) != deviceLogLen {
		t.Fatalf("kept %d records, want %d: %q", len(got), deviceLogLen, got)
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

func TestLogKeeperHeadAndTail(t *testing.T) {
	k := LogKeeper{Head: 2, Tail: 3}
	for i := range 9 {
		k.Write([]byte(strconv.Itoa(i) + "\n"))
	}
	if got, want := k.Lines(), []string{"0", "1", "... 4 records dropped", "6", "7", "8"}; !slices.Equal(got, want) {
		t.Fatalf("kept %q, want %q", got, want)
	}
	short := LogKeeper{Head: 2, Tail: 3} // exactly head and tail: nothing dropped
	for i := range 5 {
		short.Write([]byte(strconv.Itoa(i) + "\n"))
	}
	if got, want := short.Lines(), []string{"0", "1", "2", "3", "4"}; !slices.Equal(got, want) {
		t.Fatalf("kept %q, want %q", got, want)
	}
}
