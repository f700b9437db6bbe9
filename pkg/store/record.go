package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"
	"unicode"
)

// Ref names one model version.
type Ref struct {
	Name    string
	Version string
}

// String returns "name@version" (or "name" when Version is empty).
func (r Ref) String() string {
	if r.Version == "" {
		return r.Name
	}
	return r.Name + "@" + r.Version
}

// ParseRef parses "name" or "name@version". A bare name leaves Version
// empty, which the store resolves to the active version.
func ParseRef(s string) (Ref, error) {
	name, version, _ := strings.Cut(s, "@")
	r := Ref{Name: name, Version: version}
	if err := checkIdent("name", name); err != nil {
		return Ref{}, err
	}
	if strings.Contains(s, "@") {
		if err := checkIdent("version", version); err != nil {
			return Ref{}, err
		}
	}
	return r, nil
}

// checkIdent keeps names and versions printable, short and free of the
// characters the store and the CLI use as separators.
func checkIdent(what, s string) error {
	if s == "" || len(s) > 128 {
		return fmt.Errorf("%w: %s %q must be 1-128 characters", ErrBadRef, what, s)
	}
	for _, r := range s {
		if r == '@' || r == '/' || r == '\\' || r == 0 || !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return fmt.Errorf("%w: %s %q contains %q", ErrBadRef, what, s, r)
		}
	}
	return nil
}

// versionKey orders versions of one name together; NUL cannot occur in a
// name (checkIdent), so prefixes of different names never collide.
func versionKey(r Ref) []byte { return []byte(r.Name + "\x00" + r.Version) }

// Digest is a SHA-256 digest.
type Digest [sha256.Size]byte

// String returns the lowercase hex form.
func (d Digest) String() string { return hex.EncodeToString(d[:]) }

// MarshalText implements encoding.TextMarshaler (hex).
func (d Digest) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler (hex).
func (d *Digest) UnmarshalText(b []byte) error {
	if len(b) != 2*sha256.Size {
		return fmt.Errorf("digest has %d hex digits, want %d", len(b), 2*sha256.Size)
	}
	_, err := hex.Decode(d[:], b)
	return err
}

// File is one file of a stored version: its bytes are the concatenation of
// its chunks.
type File struct {
	Path   string  `json:"path"` // slash-separated, relative to the bundle
	Size   int64   `json:"size"`
	SHA256 Digest  `json:"sha256"`
	Chunks []Chunk `json:"chunks"`
}

// Chunk is one content-addressed piece of a file.
type Chunk struct {
	SHA256 Digest `json:"sha256"`
	Size   int64  `json:"size"`
}

// Version is a stored model version: the bundle's edgeinfer.json verbatim
// plus what the store adds.
type Version struct {
	Name     string          `json:"name"`
	Version  string          `json:"version"`
	Imported time.Time       `json:"imported"`
	Size     int64           `json:"size"` // sum of file sizes
	Files    []File          `json:"files"`
	Manifest json.RawMessage `json:"manifest"` // edgeinfer.json as imported
}

// Ref returns the version's reference.
func (v *Version) Ref() Ref { return Ref{Name: v.Name, Version: v.Version} }

// File returns the file with the given bundle-relative path.
func (v *Version) File(p string) (*File, bool) {
	for i := range v.Files {
		if v.Files[i].Path == p {
			return &v.Files[i], true
		}
	}
	return nil, false
}

// A record on disk is sha256(json) followed by the JSON. bbolt keeps no
// checksums of its own, so the prefix is what lets Verify and every read
// tell a damaged record (a flipped chunk list) from a valid one.
func encodeRecord(v any) ([]byte, error) {
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(j)
	return append(sum[:], j...), nil
}

func decodeRecord(b []byte, v any) error {
	if len(b) < sha256.Size {
		return fmt.Errorf("%w: record of %d bytes is truncated", ErrIntegrity, len(b))
	}
	sum := sha256.Sum256(b[sha256.Size:])
	if !bytes.Equal(sum[:], b[:sha256.Size]) {
		return fmt.Errorf("%w: record checksum mismatch", ErrIntegrity)
	}
	if err := json.Unmarshal(b[sha256.Size:], v); err != nil {
		return fmt.Errorf("%w: record: %v", ErrIntegrity, err)
	}
	return nil
}

// decodeVersion decodes and validates a version record, so that nothing
// downstream (Export writing paths, ReadFile sizing a buffer) trusts a
// record it has not checked.
func decodeVersion(b []byte) (*Version, error) {
	var v Version
	if err := decodeRecord(b, &v); err != nil {
		return nil, err
	}
	if err := v.validate(); err != nil {
		return nil, fmt.Errorf("%w: version record: %v", ErrIntegrity, err)
	}
	return &v, nil
}

func (v *Version) validate() error {
	if err := checkIdent("name", v.Name); err != nil {
		return err
	}
	if err := checkIdent("version", v.Version); err != nil {
		return err
	}
	var total int64
	seen := make(map[string]bool, len(v.Files))
	for _, f := range v.Files {
		if err := checkPath(f.Path); err != nil {
			return err
		}
		if seen[f.Path] {
			return fmt.Errorf("duplicate file %q", f.Path)
		}
		seen[f.Path] = true
		var sum int64
		for _, c := range f.Chunks {
			if c.Size <= 0 || c.Size > maxChunk {
				return fmt.Errorf("file %q: chunk size %d out of range", f.Path, c.Size)
			}
			sum += c.Size
		}
		if f.Size < 0 || sum != f.Size {
			return fmt.Errorf("file %q: size %d but chunks sum to %d", f.Path, f.Size, sum)
		}
		total += f.Size
	}
	if total != v.Size {
		return fmt.Errorf("size %d but files sum to %d", v.Size, total)
	}
	if len(v.Manifest) > 0 && !json.Valid(v.Manifest) {
		return fmt.Errorf("manifest is not valid JSON")
	}
	return nil
}

// checkPath accepts clean, relative, slash-separated paths that stay inside
// the bundle directory.
func checkPath(p string) error {
	if p == "" || p != path.Clean(p) || path.IsAbs(p) || p == "." || p == ".." ||
		strings.HasPrefix(p, "../") || strings.ContainsAny(p, "\\\x00") {
		return fmt.Errorf("bad file path %q", p)
	}
	return nil
}

// pointers is the per-name record: which version is active and which was
// active before it (the rollback target).
type pointers struct {
	Active   string `json:"active,omitempty"`
	Previous string `json:"previous,omitempty"`
}

func decodePointers(b []byte) (pointers, error) {
	var p pointers
	if err := decodeRecord(b, &p); err != nil {
		return pointers{}, err
	}
	for _, s := range []string{p.Active, p.Previous} {
		if s != "" {
			if err := checkIdent("version", s); err != nil {
				return pointers{}, fmt.Errorf("%w: pointers: %v", ErrIntegrity, err)
			}
		}
	}
	return p, nil
}

// manifest is the part of edgeinfer.json the store reads; the rest is kept
// verbatim for pkg/bundle to interpret.
type manifest struct {
	Name    string          `json:"name"`
	Version string          `json:"version"`
	Files   []manifestEntry `json:"files"`
}

// manifestEntry is one file the manifest vouches for (pkg/bundle writes
// them: path relative to the bundle, size in bytes, lowercase hex sha256).
type manifestEntry struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 Digest `json:"sha256"`
}

func (m *manifest) ref() Ref { return Ref{Name: m.Name, Version: m.Version} }

// errNoFileList is a manifest without "files": refused by Import, and
// nothing to check for Verify (versions stored before the list was needed).
var errNoFileList = errors.New(`has no "files" list: the store keeps only files a manifest vouches for (seal the bundle with pkg/bundle or edgeinfer model build)`)

// parseManifest decodes edgeinfer.json and checks what the store relies on:
// a usable name and version, and a file list whose paths stay inside the
// bundle, appear once and do not include the manifest itself.
func parseManifest(b []byte) (*manifest, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrBadBundle, ManifestFile, fmt.Sprintf(format, args...))
	}
	var raw struct {
		manifest
		Files *[]manifestEntry `json:"files"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, bad("%v", err)
	}
	m := raw.manifest
	if m.Name == "" || m.Version == "" {
		return nil, bad(`must have "name" and "version"`)
	}
	if err := checkIdent("name", m.Name); err != nil {
		return nil, bad("%v", err)
	}
	if err := checkIdent("version", m.Version); err != nil {
		return nil, bad("%v", err)
	}
	if raw.Files == nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadBundle, ManifestFile, errNoFileList)
	}
	m.Files = *raw.Files
	seen := make(map[string]bool, len(m.Files))
	for _, f := range m.Files {
		if err := checkPath(f.Path); err != nil {
			return nil, bad("%v: a listed file must be inside the bundle directory", err)
		}
		if f.Path == ManifestFile {
			return nil, bad("lists itself")
		}
		if seen[f.Path] {
			return nil, bad("lists %q twice", f.Path)
		}
		if f.Size < 0 {
			return nil, bad("file %q has size %d", f.Path, f.Size)
		}
		seen[f.Path] = true
	}
	return &m, nil
}
