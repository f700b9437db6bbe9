package platforms

import (
	"debug/elf"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
)

// ELFInfo is what a shared library or binary needs from the system.
type ELFInfo struct {
	Path string `json:"path"`
	// Machine is the ELF machine ("EM_AARCH64"), GOARCH its Go name ("arm64").
	Machine string `json:"machine"`
	GOARCH  string `json:"goarch"`
	// Glibc is the highest GLIBC_ symbol version it needs ("2.28"); ""
	// when it needs none (a static binary, musl).
	Glibc string `json:"glibc_needed,omitempty"`
	// GlibCXX is the highest GLIBCXX_ version it needs from libstdc++
	// ("3.4.22" is GCC 6's); "" when it needs none.
	GlibCXX string `json:"glibcxx_needed,omitempty"`
	// Needed are its DT_NEEDED libraries.
	Needed []string `json:"needed,omitempty"`
}

var machineArch = map[elf.Machine]string{
	elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64", elf.EM_ARM: "arm", elf.EM_386: "386", elf.EM_RISCV: "riscv64",
}

// InspectELF reads an ELF file's machine, its DT_NEEDED libraries and the
// highest glibc version it needs (from the GNU version-needs section: a
// library linked against newer symbols than the system's glibc fails to
// load with "version `GLIBC_2.34' not found").
func InspectELF(p string) (ELFInfo, error) {
	f, err := elf.Open(p)
	if err != nil {
		return ELFInfo{}, fmt.Errorf("%w: %s: %v", ErrNotELF, p, err)
	}
	defer f.Close()
	info := ELFInfo{Path: p, Machine: f.Machine.String(), GOARCH: machineArch[f.Machine]}
	info.Needed, _ = f.ImportedLibraries()
	needs, _ := f.DynamicVersionNeeds()
	for _, n := range needs {
		for _, d := range n.Needs {
			if v, ok := strings.CutPrefix(d.Dep, "GLIBC_"); ok && compareVersions(v, info.Glibc) > 0 {
				info.Glibc = v
			}
			if v, ok := strings.CutPrefix(d.Dep, "GLIBCXX_"); ok && compareVersions(v, info.GlibCXX) > 0 {
				info.GlibCXX = v
			}
		}
	}
	return info, nil
}

// SystemGlibc returns the glibc version of the system under root, and the
// libc.so.6 read: its release ("stable release version 2.31" in the file),
// else the highest GLIBC_ version it defines (a release adds no version
// node when it adds no symbols: 2.31 defines GLIBC_2.30 at most).
func SystemGlibc(root string) (version, libc string, err error) {
	if root == "" {
		root = "/"
	}
	fsys := os.DirFS(root)
	var tried []string
	for _, pat := range []string{"lib/*-linux-gnu*/libc.so.6", "usr/lib/*-linux-gnu*/libc.so.6", "lib64/libc.so.6", "usr/lib64/libc.so.6", "lib/libc.so.6", "usr/lib/libc.so.6"} {
		matches, _ := fs.Glob(fsys, pat)
		for _, m := range matches {
			p := path.Join(root, m)
			v, err := definedGlibc(p)
			if err == nil && v != "" {
				return v, p, nil
			}
			tried = append(tried, p)
		}
	}
	if len(tried) == 0 {
		return "", "", fmt.Errorf("platforms: no libc.so.6 under %s (not a glibc system: musl, or a fixture tree)", root)
	}
	return "", "", fmt.Errorf("platforms: no GLIBC_ version definitions in %s", strings.Join(tried, ", "))
}

func definedGlibc(p string) (string, error) {
	if data, err := os.ReadFile(p); err == nil {
		if v := releaseVersion(data); v != "" {
			return v, nil
		}
	}
	f, err := elf.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	defs, err := f.DynamicVersions()
	if err != nil {
		return "", err
	}
	best := ""
	for _, d := range defs {
		if v, ok := strings.CutPrefix(d.Name, "GLIBC_"); ok && compareVersions(v, best) > 0 {
			best = v
		}
	}
	return best, nil
}

// releaseVersion finds glibc's banner, "release version 2.31.", in libc.
func releaseVersion(data []byte) string {
	const marker = "release version "
	i := strings.Index(string(data), marker)
	if i < 0 {
		return ""
	}
	rest := data[i+len(marker):]
	j := 0
	for j < len(rest) && j < 12 && (rest[j] == '.' || rest[j] >= '0' && rest[j] <= '9') {
		j++
	}
	return strings.TrimSuffix(string(rest[:j]), ".")
}

// compareVersions compares dotted numeric versions ("2.34" > "2.4");
// non-numeric parts (GLIBC_PRIVATE) sort below every number.
func compareVersions(a, b string) int {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	if b == "" {
		pb = nil
	}
	if a == "" {
		pa = nil
	}
	for i := range max(len(pa), len(pb)) {
		x, y := -1, -1
		if i < len(pa) {
			if n, err := strconv.Atoi(pa[i]); err == nil {
				x = n
			} else {
				x = -2
			}
		}
		if i < len(pb) {
			if n, err := strconv.Atoi(pb[i]); err == nil {
				y = n
			} else {
				y = -2
			}
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

// GlibcCompatible says whether a file needing glibc need runs on a system
// with glibc have, and why not.
func GlibcCompatible(need, have string) (bool, string) {
	switch {
	case need == "":
		return true, "needs no versioned glibc symbols"
	case have == "":
		return false, "system glibc unknown"
	case compareVersions(need, have) <= 0:
		return true, fmt.Sprintf("needs glibc %s, system has %s", need, have)
	}
	return false, fmt.Sprintf("needs glibc %s but the system has %s: it will fail to load (version `GLIBC_%s' not found)", need, have, need)
}
