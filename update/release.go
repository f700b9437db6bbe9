package update

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/store"
)

// Repositories of the Uptane split: the image repository holds what the
// release keys signed; the director repository says which device installs
// which of those targets when. A device installs a target only if both
// list it with the same length and hashes.
const (
	RepoImage    = "image"
	RepoDirector = "director"
)

// CustomKey is the key of a target's custom field that holds its Release.
const CustomKey = "edgeinfer"

// Limits on what a release may declare, so a signed but absurd release
// cannot make the device allocate without bound.
const (
	maxFiles  = 4096
	maxChunks = 1 << 20
)

// Release is a TUF target's custom field: a model bundle version. The
// target's own length and sha256 are those of the bundle's edgeinfer.json,
// which is also one of Files.
type Release struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	// Counter increases with every release of a name; a device refuses a
	// counter not above the one it installed (rollback protection that
	// does not depend on how version strings sort).
	Counter uint64 `json:"counter"`
	// Files are the bundle's files with their chunk lists, exactly as the
	// device's store will record them.
	Files []store.File `json:"files"`
	// Boards the release is for (platform board names); empty: any.
	Boards []string `json:"boards,omitempty"`
	// Providers lists execution providers of which the device must have at
	// least one; empty: any.
	Providers []string `json:"providers,omitempty"`
	// SDK is the range of SDK versions that can run the bundle.
	SDK SDKRange `json:"sdk,omitzero"`
	// Health is the golden check run before the switch (the bundle's own,
	// copied here so it is signed with the release).
	Health *bundle.Health `json:"health,omitempty"`
}

// SDKRange is an inclusive range of SDK versions ("1.4", "1.4.2");
// empty ends are unbounded.
type SDKRange struct {
	Min string `json:"min,omitempty"`
	Max string `json:"max,omitempty"`
}

// Ref is the release's store reference.
func (r *Release) Ref() store.Ref { return store.Ref{Name: r.Name, Version: r.Version} }

// Size is the sum of the release's file sizes.
func (r *Release) Size() int64 {
	var n int64
	for _, f := range r.Files {
		n += f.Size
	}
	return n
}

// TargetPath is the TUF target path of a release: "name/version".
func TargetPath(name, version string) string { return name + "/" + version }

// ParseRelease decodes and validates a target's custom field (the raw JSON
// object that holds CustomKey). Unknown fields are refused: a field this
// build does not understand might have been a restriction.
func ParseRelease(custom []byte) (*Release, error) {
	var outer map[string]json.RawMessage
	if err := json.Unmarshal(custom, &outer); err != nil {
		return nil, fmt.Errorf("%w: target custom field: %v", ErrBadMetadata, err)
	}
	raw, ok := outer[CustomKey]
	if !ok {
		return nil, fmt.Errorf("%w: target has no %q custom field", ErrBadMetadata, CustomKey)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var r Release
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("%w: release: %v", ErrBadMetadata, err)
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

// Validate checks a release is complete and self-consistent.
func (r *Release) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: release %s@%s: "+format, append([]any{ErrBadMetadata, r.Name, r.Version}, args...)...)
	}
	if _, err := store.ParseRef(r.Name + "@" + r.Version); err != nil || r.Version == "" {
		return bad("bad name or version")
	}
	if r.Counter == 0 {
		return bad("counter must be at least 1")
	}
	if len(r.Files) == 0 || len(r.Files) > maxFiles {
		return bad("%d files (1 to %d allowed)", len(r.Files), maxFiles)
	}
	seen := map[string]bool{}
	chunks := 0
	for _, f := range r.Files {
		if f.Path == "" || seen[f.Path] || strings.HasPrefix(f.Path, "/") || strings.Contains(f.Path, "..") || strings.ContainsAny(f.Path, "\\\x00") {
			return bad("file path %q is empty, repeated or unsafe", f.Path)
		}
		seen[f.Path] = true
		var sum int64
		for _, c := range f.Chunks {
			if c.Size <= 0 || c.Size > store.MaxChunk {
				return bad("file %s: chunk size %d (1 to %d allowed)", f.Path, c.Size, store.MaxChunk)
			}
			sum += c.Size
		}
		chunks += len(f.Chunks)
		if sum != f.Size || f.Size < 0 {
			return bad("file %s: size %d but its chunks add up to %d", f.Path, f.Size, sum)
		}
	}
	if chunks > maxChunks {
		return bad("%d chunks (at most %d)", chunks, maxChunks)
	}
	if !seen[store.ManifestFile] {
		return bad("no %s among the files", store.ManifestFile)
	}
	for _, v := range []string{r.SDK.Min, r.SDK.Max} {
		if v != "" {
			if _, err := parseVersion(v); err != nil {
				return bad("sdk range: %v", err)
			}
		}
	}
	if r.Health != nil {
		if err := r.Health.Validate(); err != nil {
			return bad("%v", err)
		}
	}
	return nil
}

// Device describes what a device is, for the compatibility check.
type Device struct {
	ID         string   `json:"id"`
	Board      string   `json:"board"`
	Providers  []string `json:"providers"`
	SDKVersion string   `json:"sdk_version"`
}

// Compatible reports, as an ErrIncompatible error naming the mismatch,
// whether the release may run on d.
func (r *Release) Compatible(d Device) error {
	if len(r.Boards) > 0 && !slices.Contains(r.Boards, d.Board) {
		return fmt.Errorf("%w: %s@%s is for boards %v, this is %q", ErrIncompatible, r.Name, r.Version, r.Boards, d.Board)
	}
	if len(r.Providers) > 0 && !slices.ContainsFunc(r.Providers, func(p string) bool { return slices.Contains(d.Providers, p) }) {
		return fmt.Errorf("%w: %s@%s needs one of providers %v, this device has %v", ErrIncompatible, r.Name, r.Version, r.Providers, d.Providers)
	}
	if r.SDK.Min != "" || r.SDK.Max != "" {
		have, err := parseVersion(d.SDKVersion)
		if err != nil {
			return fmt.Errorf("%w: device SDK version: %v", ErrConfig, err)
		}
		if r.SDK.Min != "" {
			if lo, _ := parseVersion(r.SDK.Min); compareVersion(have, lo) < 0 {
				return fmt.Errorf("%w: %s@%s needs SDK >= %s, this device runs %s", ErrIncompatible, r.Name, r.Version, r.SDK.Min, d.SDKVersion)
			}
		}
		if r.SDK.Max != "" {
			if hi, _ := parseVersion(r.SDK.Max); compareVersion(have, hi) > 0 {
				return fmt.Errorf("%w: %s@%s needs SDK <= %s, this device runs %s", ErrIncompatible, r.Name, r.Version, r.SDK.Max, d.SDKVersion)
			}
		}
	}
	return nil
}

// parseVersion reads "1", "1.4" or "1.4.2" (a leading "v" allowed, a
// "-suffix" ignored).
func parseVersion(s string) ([3]int, error) {
	var v [3]int
	t := strings.TrimPrefix(s, "v")
	t, _, _ = strings.Cut(t, "-")
	parts := strings.Split(t, ".")
	if t == "" || len(parts) > 3 {
		return v, fmt.Errorf("version %q (want MAJOR[.MINOR[.PATCH]])", s)
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return v, fmt.Errorf("version %q (want MAJOR[.MINOR[.PATCH]])", s)
		}
		v[i] = n
	}
	return v, nil
}

func compareVersion(a, b [3]int) int {
	for i := range a {
		if a[i] != b[i] {
			if a[i] < b[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}
