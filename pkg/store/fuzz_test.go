package store

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func FuzzDecodeVersion(f *testing.F) {
	v := &Version{Name: "m", Version: "1", Imported: time.Unix(0, 0).UTC(), Size: 3,
		Files:    []File{{Path: "model.onnx", Size: 3, Chunks: []Chunk{{Size: 3}}}},
		Manifest: []byte(`{"name":"m","version":"1"}`)}
	good, err := encodeRecord(v)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte{})
	bad, _ := encodeRecord(map[string]any{"name": "m", "version": "1", "size": 1, "files": []any{map[string]any{"path": "../x", "size": 1}}})
	f.Add(bad)
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := decodeVersion(b)
		if err != nil {
			return
		}
		// Whatever decodes is safe to use: paths stay inside a bundle and
		// chunk sizes add up to the file sizes.
		for _, file := range v.Files {
			if checkPath(file.Path) != nil {
				t.Fatalf("accepted path %q", file.Path)
			}
		}
		again, err := encodeRecord(v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeVersion(again); err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
	})
}

func FuzzDecodePointers(f *testing.F) {
	good, _ := encodeRecord(pointers{Active: "2", Previous: "1"})
	f.Add(good)
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := decodePointers(b)
		if err != nil {
			return
		}
		for _, s := range []string{p.Active, p.Previous} {
			if s != "" && checkIdent("version", s) != nil {
				t.Fatalf("accepted version %q", s)
			}
		}
	})
}

func FuzzParseRef(f *testing.F) {
	for _, s := range []string{"m", "m@1", "m@", "@1", "a@b@c", "tiny llama@1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRef(s)
		if err != nil {
			return
		}
		back, err := ParseRef(r.String())
		if err != nil || back != r {
			t.Fatalf("%q -> %+v -> %q -> %+v, %v", s, r, r.String(), back, err)
		}
	})
}

func FuzzParseManifest(f *testing.F) {
	sum := strings.Repeat("ab", 32)
	f.Add([]byte(`{"name":"m","version":"1","kind":"decoder","files":[]}`))
	f.Add([]byte(`{"name":"m","version":"1","files":[{"path":"model.onnx","size":3,"sha256":"` + sum + `"}]}`))
	f.Add([]byte(`{"name":"m","version":"1","files":[{"path":"../x","size":3,"sha256":"` + sum + `"}]}`))
	f.Add([]byte(`{"name":"m","version":"1","files":[{"path":"a","size":1,"sha256":"` + sum + `"},{"path":"a","size":1,"sha256":"` + sum + `"}]}`))
	f.Add([]byte(`{"name":"m","version":"1","files":[{"path":"edgeinfer.json","size":-1,"sha256":"00"}]}`))
	f.Add([]byte(`{"name":"m","version":"1"}`))
	f.Add([]byte(`{"name":"","version":"1"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseManifest(b)
		if err != nil {
			if !errors.Is(err, ErrBadBundle) {
				t.Fatalf("error %v is not ErrBadBundle", err)
			}
			return
		}
		// What parses is safe to act on: a valid reference, and paths that
		// stay inside the bundle, each listed once, none the manifest.
		if checkIdent("name", m.Name) != nil || checkIdent("version", m.Version) != nil {
			t.Fatalf("accepted %+v", m.ref())
		}
		seen := map[string]bool{}
		for _, f := range m.Files {
			if checkPath(f.Path) != nil || f.Path == ManifestFile || seen[f.Path] || f.Size < 0 {
				t.Fatalf("accepted file %+v", f)
			}
			seen[f.Path] = true
		}
	})
}

func FuzzParseLockLine(f *testing.F) {
	f.Add("1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF", uint64(0x801), uint64(5678))
	f.Add("2: POSIX  ADVISORY  READ 99 fd:00:12 0 EOF", uint64(0), uint64(12))
	f.Add("1: -> FLOCK  ADVISORY  WRITE 7 08:01:5678 0 EOF", uint64(0x801), uint64(5678))
	f.Fuzz(func(t *testing.T, line string, dev, ino uint64) {
		if pid, ok := parseLockLine(line, dev, ino); ok && pid <= 0 {
			t.Fatalf("pid %d", pid)
		}
	})
}

func TestParseLockLine(t *testing.T) {
	tests := []struct {
		line string
		pid  int
		ok   bool
	}{
		{"1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF", 1234, true},
		{"1: FLOCK  ADVISORY  WRITE 1234 08:01:5679 0 EOF", 0, false},
		{"1: POSIX  ADVISORY  WRITE 1234 08:01:5678 0 EOF", 0, false},
		{"1: -> FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF", 0, false},
	}
	for _, tc := range tests {
		pid, ok := parseLockLine(tc.line, 0x801, 5678)
		if pid != tc.pid || ok != tc.ok {
			t.Errorf("%q: %d %v", tc.line, pid, ok)
		}
	}
}
