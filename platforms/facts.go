package platforms

import (
	"cmp"
	"fmt"
	"io/fs"
	"os"
	"path"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// Facts is what detection read from the system files under one root. Every
// field is as found; a file that was absent leaves its field zero, and a
// file that was present but unusable adds a warning.
type Facts struct {
	// Root is the directory read ("/" on a device).
	Root string `json:"root"`
	// Model is /proc/device-tree/model (ARM boards).
	Model string `json:"device_tree_model,omitempty"`
	// Compatible is /proc/device-tree/compatible, most specific first.
	Compatible []string `json:"device_tree_compatible,omitempty"`
	// DMI is /sys/class/dmi/id (x86 and ARM servers).
	DMI DMI `json:"dmi"`
	// CPU is /proc/cpuinfo.
	CPU CPUInfo `json:"cpu"`
	// Capacity is each CPU's cpu_capacity (index = CPU number), nil when
	// the kernel exposes none or one of them is garbage.
	Capacity []int `json:"cpu_capacity,omitempty"`
	// PCores are Intel hybrid CPUs' performance cores
	// (/sys/devices/cpu_core/cpus), nil elsewhere.
	PCores []int `json:"intel_p_cores,omitempty"`
	// Mem is /proc/meminfo; zero when unreadable.
	Mem Meminfo `json:"memory"`
	// L4T is the Jetson Linux release from /etc/nv_tegra_release ("36.3.0").
	L4T string `json:"l4t,omitempty"`
	// NVIDIA lists evidence of an NVIDIA GPU with its driver: the
	// /proc/driver/nvidia/version line or PCI devices of vendor 0x10de.
	NVIDIA []string `json:"nvidia_gpu,omitempty"`
	// IntelNPU is the accel device bound to the intel_vpu driver, "" if none.
	IntelNPU string `json:"intel_npu,omitempty"`
	// QualcommDSP is a FastRPC device node of a Hexagon DSP, "" if none.
	QualcommDSP string `json:"qualcomm_dsp,omitempty"`
	// Warnings are files present but unusable, with what was done instead.
	Warnings []string `json:"warnings,omitempty"`
}

// DMI is the firmware's identification of the machine.
type DMI struct {
	SysVendor   string `json:"sys_vendor,omitempty"`
	ProductName string `json:"product_name,omitempty"`
	BoardVendor string `json:"board_vendor,omitempty"`
	BoardName   string `json:"board_name,omitempty"`
}

func (f *Facts) warn(format string, args ...any) {
	f.Warnings = append(f.Warnings, fmt.Sprintf(format, args...))
}

// hasCompatible reports whether any compatible string has the prefix.
func (f *Facts) hasCompatible(prefix string) bool {
	return slices.ContainsFunc(f.Compatible, func(c string) bool { return strings.HasPrefix(c, prefix) })
}

// compatibleWith returns the first compatible string with the prefix.
func (f *Facts) compatibleWith(prefix string) string {
	i := slices.IndexFunc(f.Compatible, func(c string) bool { return strings.HasPrefix(c, prefix) })
	if i < 0 {
		return ""
	}
	return f.Compatible[i]
}

// ReadFacts reads the detection files under root ("" means "/").
func ReadFacts(root string) Facts {
	if root == "" {
		root = "/"
	}
	return readFacts(os.DirFS(root), root)
}

// readFile reads a small system file; nil when absent or unreadable.
// Files are capped at 1 MiB: /proc/cpuinfo of a 256-core server is ~200 KB.
func readFile(fsys fs.FS, name string) []byte {
	f, err := fsys.Open(name)
	if err != nil {
		return nil
	}
	defer f.Close()
	buf := make([]byte, 0, 4096)
	for len(buf) < 1<<20 {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, len(buf))
		}
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err != nil {
			break
		}
	}
	return buf
}

func readTrim(fsys fs.FS, name string) string {
	s := strings.TrimSpace(strings.TrimRight(string(readFile(fsys, name)), "\x00"))
	if !printable(s) {
		return ""
	}
	return s
}

func readFacts(fsys fs.FS, root string) Facts {
	f := Facts{Root: root}
	if m := parseDTStrings(readFile(fsys, "proc/device-tree/model")); len(m) > 0 {
		f.Model = m[0]
	}
	for _, c := range parseDTStrings(readFile(fsys, "proc/device-tree/compatible")) {
		f.Compatible = append(f.Compatible, strings.ToLower(c))
	}
	f.DMI = DMI{
		SysVendor:   readTrim(fsys, "sys/class/dmi/id/sys_vendor"),
		ProductName: readTrim(fsys, "sys/class/dmi/id/product_name"),
		BoardVendor: readTrim(fsys, "sys/class/dmi/id/board_vendor"),
		BoardName:   readTrim(fsys, "sys/class/dmi/id/board_name"),
	}
	if b := readFile(fsys, "proc/cpuinfo"); b != nil {
		f.CPU = parseCPUInfo(b)
	} else {
		f.warn("/proc/cpuinfo unreadable: CPU architecture taken from the build, thread count from the CPU list")
	}
	f.readCapacity(fsys)
	if b := readFile(fsys, "sys/devices/cpu_core/cpus"); b != nil {
		if l, err := parseCPUList(b); err == nil {
			f.PCores = l
		} else {
			f.warn("/sys/devices/cpu_core/cpus: %v; performance cores not known", err)
		}
	}
	if b := readFile(fsys, "proc/meminfo"); b != nil {
		m, err := parseMeminfo(b)
		if err != nil {
			f.warn("%v; KV budget left at the engine default", err)
		}
		f.Mem = m
	}
	f.L4T = parseTegraRelease(readFile(fsys, "etc/nv_tegra_release"))
	f.readDevices(fsys)
	return f
}

// readCapacity reads cpu_capacity of every CPU. One garbage file voids the
// lot: a big.LITTLE plan from half the cores would pin threads wrongly.
func (f *Facts) readCapacity(fsys fs.FS) {
	dirs, _ := fs.Glob(fsys, "sys/devices/system/cpu/cpu[0-9]*")
	type cc struct{ cpu, capacity int }
	var caps []cc
	for _, d := range dirs {
		n, err := strconv.Atoi(strings.TrimPrefix(path.Base(d), "cpu"))
		if err != nil || n > 1<<12 {
			continue
		}
		b := readFile(fsys, d+"/cpu_capacity")
		if b == nil {
			continue
		}
		c, err := parseCapacity(b)
		if err != nil {
			f.warn("/%s/cpu_capacity: %v; core sizes ignored (CPU part used where known)", d, err)
			f.Capacity = nil
			return
		}
		caps = append(caps, cc{n, c})
	}
	if len(caps) == 0 {
		return
	}
	slices.SortFunc(caps, func(a, b cc) int { return cmp.Compare(a.cpu, b.cpu) })
	if caps[len(caps)-1].cpu != len(caps)-1 {
		f.warn("cpu_capacity present for %d CPUs but not numbered 0..%d; core sizes ignored", len(caps), len(caps)-1)
		return
	}
	for _, c := range caps {
		f.Capacity = append(f.Capacity, c.capacity)
	}
}

// readDevices looks for accelerators by their drivers' files.
func (f *Facts) readDevices(fsys fs.FS) {
	if v := readTrim(fsys, "proc/driver/nvidia/version"); v != "" {
		first, _, _ := strings.Cut(v, "\n")
		f.NVIDIA = append(f.NVIDIA, "/proc/driver/nvidia/version: "+first)
	}
	devs, _ := fs.Glob(fsys, "sys/bus/pci/devices/*")
	for _, d := range devs {
		vendor, class := readTrim(fsys, d+"/vendor"), readTrim(fsys, d+"/class")
		// 0x03xxxx is a display controller (VGA 0x0300, 3D 0x0302).
		if strings.EqualFold(vendor, "0x10de") && strings.HasPrefix(class, "0x03") {
			f.NVIDIA = append(f.NVIDIA, fmt.Sprintf("PCI %s vendor 0x10de class %s", path.Base(d), class))
		}
	}
	accels, _ := fs.Glob(fsys, "sys/class/accel/accel*")
	for _, a := range accels {
		// The driver link's target ends in the driver name; in a fixture it
		// may be a file naming it.
		drv := ""
		if l, err := fs.ReadLink(fsys, a+"/device/driver"); err == nil {
			drv = path.Base(l)
		} else {
			drv = readTrim(fsys, a+"/device/driver")
			drv = path.Base(drv)
		}
		if drv == "intel_vpu" {
			f.IntelNPU = "/" + a + " (driver intel_vpu)"
		}
	}
	for _, n := range []string{"dev/fastrpc-cdsp", "dev/fastrpc-cdsp-secure", "dev/adsprpc-smd"} {
		if _, err := fs.Stat(fsys, n); err == nil {
			f.QualcommDSP = "/" + n
			break
		}
	}
}

// BoardName names the machine as status and telemetry show it: the device
// tree's model on ARM boards, the DMI product name on PCs, else OS/arch.
// It reads only those two files (ReadFacts reads everything).
func BoardName(root string) string {
	fsys := os.DirFS(root)
	if m := parseDTStrings(readFile(fsys, "proc/device-tree/model")); len(m) > 0 && printable(m[0]) {
		return m[0]
	}
	if p := readTrim(fsys, "sys/class/dmi/id/product_name"); p != "" {
		return p
	}
	return runtime.GOOS + "/" + runtime.GOARCH
}
