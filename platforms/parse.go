package platforms

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The parsers of this file read the system files detection uses. Each takes
// the file's bytes as they are (the kernel's, or a fixture's, or garbage)
// and never panics; they are fuzzed in parse_fuzz_test.go.

// parseDTStrings splits a device-tree string list (compatible: NUL-
// separated, NUL-terminated) or a single string (model: NUL-terminated).
// Empty entries and surrounding space are dropped; entries are lowercased
// only for compatible, so parseDTStrings keeps the case.
func parseDTStrings(b []byte) []string {
	var out []string
	for s := range strings.SplitSeq(string(b), "\x00") {
		if s = strings.TrimSpace(s); s != "" && printable(s) {
			out = append(out, s)
		}
	}
	return out
}

// printable rejects binary junk (a fixture or a broken firmware table) so
// it never reaches a report.
func printable(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == '\uFFFD' {
			return false
		}
	}
	return true
}

// CPUInfo is what /proc/cpuinfo says about the processors.
type CPUInfo struct {
	// Arch is the CPU's architecture as Go spells it ("amd64", "arm64",
	// "arm"), from the file's own fields; "" when it does not say.
	Arch string `json:"arch"`
	// Model is the "model name" (x86, armv7) or "Model" (Raspberry Pi
	// kernels) line; "" when absent.
	Model string `json:"model,omitempty"`
	// Hardware is the "Hardware" line of 32-bit ARM kernels ("BCM2835").
	Hardware string `json:"hardware,omitempty"`
	// Processors is the number of logical processors listed.
	Processors int `json:"processors"`
	// Cores is the number of physical cores: distinct (physical id, core
	// id) pairs on x86, else one per processor (no SMT on these ARM parts).
	Cores int `json:"cores"`
	// Features are the flags (x86) or Features (ARM) of the first
	// processor.
	Features []string `json:"-"`
	// Parts are the ARM "CPU part" of each processor in order, as the
	// kernel writes them ("0xd0b"); nil on x86.
	Parts []string `json:"parts,omitempty"`
	// FirstSibling maps each logical processor to the lowest processor
	// number on the same physical core (x86 SMT); nil when unknown.
	FirstSibling map[int]int `json:"-"`
}

// parseCPUInfo parses /proc/cpuinfo of x86 and ARM kernels.
func parseCPUInfo(b []byte) CPUInfo {
	var ci CPUInfo
	type core struct{ pkg, id string }
	cores := map[core]int{} // first processor of each core
	cur, pkgID, coreID := -1, "", ""
	haveFeatures, sawFlags := false, false
	archLine := ""
	finish := func() {
		if cur < 0 || coreID == "" {
			return
		}
		k := core{pkgID, coreID}
		first, ok := cores[k]
		if !ok {
			first = cur
			cores[k] = cur
		}
		if ci.FirstSibling == nil {
			ci.FirstSibling = map[int]int{}
		}
		ci.FirstSibling[cur] = first
	}
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "processor":
			finish()
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > 1<<16 {
				cur = -1
				continue
			}
			cur, pkgID, coreID = n, "", ""
			ci.Processors++
		case "physical id":
			pkgID = v
		case "core id":
			coreID = v
		case "model name", "Model":
			if ci.Model == "" && printable(v) {
				ci.Model = v
			}
		case "Hardware":
			if printable(v) {
				ci.Hardware = v
			}
		case "flags", "Features":
			if k == "flags" {
				sawFlags = true
			}
			if !haveFeatures {
				ci.Features = strings.Fields(v)
				haveFeatures = true
			}
		case "CPU architecture":
			archLine = v
		case "CPU part":
			if cur >= 0 && printable(v) {
				ci.Parts = append(ci.Parts, strings.ToLower(v))
			}
		}
	}
	finish()
	switch {
	case sawFlags:
		ci.Arch = "amd64"
	case archLine == "8" || strings.HasPrefix(archLine, "AArch64"):
		ci.Arch = "arm64"
	case archLine == "7" || strings.HasPrefix(strings.ToLower(ci.Model), "armv7"):
		ci.Arch = "arm"
	}
	ci.Cores = ci.Processors
	if len(cores) > 0 {
		ci.Cores = len(cores)
	}
	if len(ci.Parts) != ci.Processors {
		ci.Parts = nil // a part per processor or none: half a list would mislabel cores
	}
	return ci
}

// armParts names the ARM cores the profiles care about, by CPU part.
var armParts = map[string]string{
	"0xd03": "Cortex-A53", "0xd05": "Cortex-A55", "0xd08": "Cortex-A72", "0xd0b": "Cortex-A76",
	"0xd0c": "Neoverse-N1", "0xd41": "Cortex-A78", "0xd42": "Cortex-A78AE", "0xd44": "Cortex-X1",
	"0xd46": "Cortex-A510", "0xd47": "Cortex-A710", "0xd48": "Cortex-X2", "0xd4d": "Cortex-A715",
	"0xd4e": "Cortex-X3", "0x001": "Oryon", "0x004": "Carmel",
}

// Meminfo is the two lines of /proc/meminfo the KV budget uses.
type Meminfo struct {
	TotalBytes     int64 `json:"total_bytes"`
	AvailableBytes int64 `json:"available_bytes"`
}

// parseMeminfo reads MemTotal and MemAvailable (kB). A file without
// MemTotal is an error: the budget then falls back to the engine default.
func parseMeminfo(b []byte) (Meminfo, error) {
	var m Meminfo
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || n < 0 || n > 1<<44 { // 16 PiB in kB: anything above is junk
			continue
		}
		mult := int64(1)
		if len(f) > 1 && strings.EqualFold(f[1], "kB") {
			mult = 1024
		}
		switch strings.TrimSpace(k) {
		case "MemTotal":
			m.TotalBytes = n * mult
		case "MemAvailable":
			m.AvailableBytes = n * mult
		}
	}
	if m.TotalBytes == 0 {
		return m, fmt.Errorf("%w: /proc/meminfo has no MemTotal", ErrParse)
	}
	return m, nil
}

// parseCapacity reads one cpu_capacity file: an integer in 1..1024 (the
// kernel normalises the biggest core to 1024).
func parseCapacity(b []byte) (int, error) {
	s := strings.TrimSpace(string(b))
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 || n > 1024 {
		if len(s) > 32 {
			s = s[:32] + "..."
		}
		return 0, fmt.Errorf("%w: cpu_capacity %q is not an integer in 1..1024", ErrParse, s)
	}
	return n, nil
}

// parseCPUList reads a kernel CPU list ("0-3,8,10-11"), as in
// /sys/devices/cpu_core/cpus. Ranges are bounded so junk cannot allocate.
func parseCPUList(b []byte) ([]int, error) {
	var out []int
	s := strings.TrimSpace(string(b))
	if s == "" {
		return nil, nil
	}
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 || a > 1<<12 {
			return nil, fmt.Errorf("%w: cpu list %q", ErrParse, s)
		}
		z := a
		if isRange {
			if z, err = strconv.Atoi(hi); err != nil || z < a || z > 1<<12 {
				return nil, fmt.Errorf("%w: cpu list %q", ErrParse, s)
			}
		}
		for c := a; c <= z; c++ {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// parseTegraRelease reads /etc/nv_tegra_release ("# R36 (release),
// REVISION: 3.0, GCID: ...") into the L4T release "36.3.0"; "" when the
// file does not have that form.
func parseTegraRelease(b []byte) string {
	s := string(b)
	i := strings.Index(s, "# R")
	if i < 0 {
		return ""
	}
	s = s[i+3:]
	j := 0
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	if j == 0 || j > 3 {
		return ""
	}
	major := s[:j]
	rev := ""
	if k := strings.Index(s, "REVISION:"); k >= 0 {
		r := strings.TrimSpace(s[k+len("REVISION:"):])
		if c := strings.IndexAny(r, ", \n"); c >= 0 {
			r = r[:c]
		}
		if r != "" && strings.Trim(r, "0123456789.") == "" && len(r) <= 8 {
			rev = "." + r
		}
	}
	return major + rev
}

// jetPackFor maps an L4T major release to its JetPack line.
func jetPackFor(l4t string) string {
	major, _, _ := strings.Cut(l4t, ".")
	switch major {
	case "36":
		return "JetPack 6"
	case "35":
		return "JetPack 5"
	case "32":
		return "JetPack 4"
	case "38":
		return "JetPack 7"
	}
	return ""
}

// simdFlags are the vector extensions ONNX Runtime's CPU kernels choose
// between (x86 and ARM spellings of /proc/cpuinfo).
var simdFlags = []string{"avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_tile",
	"asimd", "asimddp", "asimdhp", "sve", "sve2", "i8mm", "bf16"}

// SIMD returns the vector extensions of the first processor that ONNX
// Runtime's kernels care about, in a fixed order.
func (ci CPUInfo) SIMD() []string {
	out := []string{}
	for _, f := range simdFlags {
		if slices.Contains(ci.Features, f) {
			out = append(out, f)
		}
	}
	return out
}

// CoreNames names the ARM cores by CPU part ("4×Cortex-A55, 4×Cortex-A76");
// "" when the parts are not known.
func (ci CPUInfo) CoreNames() string {
	if len(ci.Parts) == 0 {
		return ""
	}
	return partSummary(ci.Parts)
}
