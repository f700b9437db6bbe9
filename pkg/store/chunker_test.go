package store

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"testing"
	"testing/iotest"
)

func TestChunkerBounds(t *testing.T) {
	data := randBytes(40, 24<<20)
	var total int
	var sizes []int
	// A one-byte reader exercises the refill path.
	c := newChunker(io.MultiReader(bytes.NewReader(data[:1000]), iotest.HalfReader(bytes.NewReader(data[1000:]))))
	var joined []byte
	for {
		b, err := c.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		joined = append(joined, b...)
		sizes = append(sizes, len(b))
		total += len(b)
	}
	if !bytes.Equal(joined, data) {
		t.Fatal("chunks do not reassemble the input")
	}
	for i, n := range sizes {
		if n > maxChunk || (n < minChunk && i != len(sizes)-1) {
			t.Fatalf("chunk %d has %d bytes", i, n)
		}
	}
	t.Logf("%d chunks, mean %d KiB", len(sizes), total/len(sizes)>>10)
	if mean := total / len(sizes); mean < avgChunk/2 || mean > 2*avgChunk {
		t.Errorf("mean chunk %d far from %d", mean, avgChunk)
	}
}

type chunkFunc func(data []byte) [][]byte

func cdcChunks(data []byte) [][]byte {
	var out [][]byte
	for len(data) > 0 {
		n := cutPoint(data)
		out = append(out, data[:n])
		data = data[n:]
	}
	return out
}

func fixedChunks(data []byte) [][]byte {
	var out [][]byte
	for len(data) > 0 {
		n := min(avgChunk, len(data))
		out = append(out, data[:n])
		data = data[n:]
	}
	return out
}

// newBytes is what storing v2 adds to a store that holds v1.
func newBytes(split chunkFunc, v1, v2 []byte) int64 {
	have := map[[32]byte]bool{}
	for _, c := range split(v1) {
		have[sha256.Sum256(c)] = true
	}
	var n int64
	for _, c := range split(v2) {
		d := sha256.Sum256(c)
		if !have[d] {
			n += int64(len(c))
			have[d] = true
		}
	}
	return n
}

// dedupFigures measures, for fixed-size and content-defined chunks, the
// bytes a second version adds when one twelfth of the file is rewritten
// in place and when 4 KiB are inserted a third of the way in.
func dedupFigures(t testing.TB, size int) (region, insert map[string]int64, changed int64) {
	v1 := randBytes(41, size)
	v2 := bytes.Clone(v1)
	changed = int64(size / 12)
	copy(v2[5*size/12:], randBytes(42, int(changed)))
	at := size / 3
	v3 := append(append(bytes.Clone(v1[:at]), randBytes(43, 4096)...), v1[at:]...)
	region = map[string]int64{"fixed": newBytes(fixedChunks, v1, v2), "cdc": newBytes(cdcChunks, v1, v2)}
	insert = map[string]int64{"fixed": newBytes(fixedChunks, v1, v3), "cdc": newBytes(cdcChunks, v1, v3)}
	t.Logf("file %d MiB, region of %d MiB rewritten: fixed adds %.2f MiB (%.2fx), cdc adds %.2f MiB (%.2fx)",
		size>>20, changed>>20, mib(region["fixed"]), float64(region["fixed"])/float64(changed), mib(region["cdc"]), float64(region["cdc"])/float64(changed))
	t.Logf("file %d MiB, 4 KiB inserted at 1/3: fixed adds %.2f MiB, cdc adds %.2f MiB", size>>20, mib(insert["fixed"]), mib(insert["cdc"]))
	return region, insert, changed
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

func TestDedupCDCvsFixed(t *testing.T) {
	size := 96 << 20
	if testing.Short() || raceEnabled {
		size = 24 << 20
	}
	region, insert, changed := dedupFigures(t, size)
	// Insertion: fixed-size chunks re-store everything after the insert;
	// CDC re-stores about the chunk around it.
	if insert["cdc"] > 3*maxChunk || insert["fixed"] < int64(size/2) {
		t.Errorf("insert: cdc %d, fixed %d", insert["cdc"], insert["fixed"])
	}
	// Rewritten region: both pay the region plus the chunks at its edges.
	if region["cdc"] > changed+2*maxChunk {
		t.Errorf("region: cdc added %d for %d changed", region["cdc"], changed)
	}
}

// TestDedupFigures450 is the figure: a ~450 MB file with one
// "layer" (1/12) rewritten must add at most 1.2x the changed bytes.
// Opt-in: EDGEINFER_STORE_BIG=1.
func TestDedupFigures450(t *testing.T) {
	if os.Getenv("EDGEINFER_STORE_BIG") == "" {
		t.Skip("set EDGEINFER_STORE_BIG=1 for the 450 MB figures")
	}
	region, _, changed := dedupFigures(t, 450<<20)
	if r := float64(region["cdc"]) / float64(changed); r > 1.2 {
		t.Errorf("cdc adds %.2fx the changed bytes, want <= 1.2x", r)
	}
}
