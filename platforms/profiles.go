package platforms

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

// profile is one board family: how it is recognised and what it chooses.
type profile struct {
	id, name string
	// match returns the evidence that the facts are this board, nil when
	// they are not.
	match func(f *Facts) []string
	// build fills the plan's providers, sensors and notes; threads and KV
	// are already chosen from the facts and may be adjusted.
	build func(f *Facts, p *Plan, opts DetectOptions)
}

// profiles are tried in order: the specific before the general (a Jetson is
// also an arm64 machine; a Core Ultra with an NVIDIA GPU is the NVIDIA
// profile, which lists OpenVINO after CUDA).
var profiles = []profile{
	{id: "jetson-orin", name: "NVIDIA Jetson Orin", match: matchJetson(true), build: buildJetson},
	{id: "jetson", name: "NVIDIA Jetson (Xavier, TX2, Nano)", match: matchJetson(false), build: buildJetson},
	{id: "rpi5", name: "Raspberry Pi 5", match: matchCompat("raspberrypi,5", "brcm,bcm2712", "Raspberry Pi 5"), build: buildPi},
	{id: "rpi4", name: "Raspberry Pi 4", match: matchCompat("raspberrypi,4", "brcm,bcm2711", "Raspberry Pi 4"), build: buildPi},
	{id: "rk3588", name: "Rockchip RK3588/RK3588S", match: matchCompat("", "rockchip,rk3588", ""), build: buildRK3588},
	{id: "qualcomm", name: "Qualcomm Snapdragon / QCS", match: matchQualcomm, build: buildQualcomm},
	{id: "x86-nvidia", name: "x86-64 with an NVIDIA GPU", match: matchNVIDIA, build: buildNVIDIA},
	{id: "intel-core-ultra", name: "Intel Core Ultra", match: matchCoreUltra, build: buildCoreUltra},
}

// generics are the fallbacks by CPU architecture.
var generics = []profile{
	{id: "generic-arm64", name: "generic Linux arm64", build: buildGeneric},
	{id: "generic-arm", name: "generic Linux arm (32-bit)", build: buildGeneric},
	{id: "generic-amd64", name: "generic Linux amd64", build: buildGeneric},
	{id: "generic", name: "generic Linux", build: buildGeneric},
}

// ProfileIDs lists every profile's ID, specific ones first.
func ProfileIDs() []string {
	var out []string
	for _, p := range slices.Concat(profiles, generics) {
		out = append(out, p.id)
	}
	return out
}

func profileByID(id string) *profile {
	for _, list := range [][]profile{profiles, generics} {
		for i := range list {
			if list[i].id == id {
				return &list[i]
			}
		}
	}
	return nil
}

func genericProfile(f *Facts) *profile {
	if p := profileByID("generic-" + f.arch()); p != nil {
		return p
	}
	return profileByID("generic")
}

// matchCompat matches a board by compatible prefixes or a model prefix.
func matchCompat(boardCompat, socCompat, modelPrefix string) func(*Facts) []string {
	return func(f *Facts) []string {
		var ev []string
		for _, c := range []string{boardCompat, socCompat} {
			if c != "" && f.hasCompatible(c) {
				ev = append(ev, fmt.Sprintf("/proc/device-tree/compatible has %q", f.compatibleWith(c)))
			}
		}
		if modelPrefix != "" && strings.HasPrefix(f.Model, modelPrefix) {
			ev = append(ev, fmt.Sprintf("/proc/device-tree/model is %q", f.Model))
		}
		return ev
	}
}

// matchJetson matches Tegra SoCs: orin selects tegra234 (or a model naming
// Orin), the other profile the older ones. A model string naming a Jetson
// is enough: it is what a lying or half-populated tree leaves.
func matchJetson(orin bool) func(*Facts) []string {
	return func(f *Facts) []string {
		var ev []string
		isOrin := f.hasCompatible("nvidia,tegra234") || strings.Contains(f.Model, "Orin")
		tegra := f.hasCompatible("nvidia,tegra") || strings.Contains(f.Model, "Jetson")
		if !tegra || isOrin != orin {
			return nil
		}
		if c := f.compatibleWith("nvidia,tegra"); c != "" {
			ev = append(ev, fmt.Sprintf("/proc/device-tree/compatible has %q", c))
		}
		if strings.Contains(f.Model, "Jetson") || strings.Contains(f.Model, "NVIDIA") {
			ev = append(ev, fmt.Sprintf("/proc/device-tree/model is %q", f.Model))
		}
		if f.L4T != "" {
			ev = append(ev, fmt.Sprintf("/etc/nv_tegra_release: L4T R%s (%s)", f.L4T, cmp.Or(jetPackFor(f.L4T), "unknown JetPack")))
		}
		return ev
	}
}

func buildJetson(f *Facts, p *Plan, opts DetectOptions) {
	p.Providers = []ort.ProviderConfig{tensorRT(opts), {Name: ort.CUDA}, {Name: ort.CPU}}
	p.Notes = append(p.Notes,
		"TensorRT and CUDA need an ONNX Runtime built for JetPack with libonnxruntime_providers_tensorrt.so, _cuda.so and _shared.so beside libonnxruntime.so (NVIDIA's JetPack builds of onnxruntime-gpu carry them); the npm arm64 library is CPU-only, so set ONNXRUNTIME_LIB to the JetPack build",
		"the paged decoder's ai.edgeinfer.PagedAttention is a CPU kernel: a decoder bundle built with --portable-attention keeps attention on the GPU",
		"CPU and GPU share the module's memory: the KV budget comes out of the same pool as the GPU's buffers")
	agx := strings.Contains(f.Model, "AGX")
	rails := "Orin Nano/NX: VDD_IN is the module's input (scope board_input) and the figure to report; VDD_CPU_GPU_CV and VDD_SOC are parts of it, never added to it"
	if agx {
		rails = "AGX Orin has no VDD_IN rail: VDD_GPU_SOC + VDD_CPU_CV + VIN_SYS_5V0 (+ VDDQ_VDD2_1V8AO on 1-0041) sum to a partial module figure, reported as partial"
	}
	if p.Board == "jetson" {
		rails = "INA3221 rails (JetPack 5: ina3221 hwmon; JetPack 4: ina3221x iio in_powerK_input mW); the *_IN rail is the board input"
	}
	p.Sensors = []SensorWant{
		{Source: "jetson-ina3221", Kind: "power", Expected: true, Why: rails},
		{Source: "thermal", Kind: "thermal", Expected: true, Why: "cpu-thermal, gpu-thermal, soc*-thermal and tj-thermal (the junction maximum the firmware throttles on)"},
		{Source: "devfreq", Kind: "frequency", Expected: true, Why: "the GPU's devfreq node (17000000.gpu or .ga10b): its frequency drops before the clocks throttle"},
	}
	switch jp := jetPackFor(f.L4T); {
	case f.L4T == "":
		p.Notes = append(p.Notes, "no /etc/nv_tegra_release: the JetPack release is unknown (JetPack 6 is L4T R36)")
	case jp == "JetPack 5" || jp == "JetPack 4":
		p.Warnings = append(p.Warnings, fmt.Sprintf(
			"%s (L4T R%s, Ubuntu 20.04 or older) has glibc 2.31 or older: binaries built on Debian 12 need glibc 2.34; build with the Debian 11 sysroot recipe in platforms/README.md", jp, f.L4T))
	}
	if p.Board == "jetson" {
		p.Notes = append(p.Notes, "not an Orin: this profile's choices are the Orin's, untested on Xavier/TX2/Nano")
	}
	if !f.hasCompatible("nvidia,tegra") {
		p.Warnings = append(p.Warnings, fmt.Sprintf("the model %q names a Jetson but compatible has no nvidia,tegra entry: treated as a Jetson; if it is not one, force the board (DetectOptions.Board)", f.Model))
	}
}

func buildPi(f *Facts, p *Plan, _ DetectOptions) {
	p.Providers = providers(ort.XNNPACK, ort.CPU)
	p.Notes = append(p.Notes,
		"XNNPACK is used only where the ONNX Runtime library has it: the npm arm64 library does not (it answers \"not supported in this build\"), so the CPU provider runs",
		"no GPU or NPU with an ONNX Runtime provider (the VideoCore GPU has none)")
	if p.Board == "rpi4" {
		p.Notes = append(p.Notes, "Cortex-A72 has no dot-product instructions (asimddp): int8 models gain less than on a Pi 5")
	}
	if f.arch() == "arm" {
		p.Warnings = append(p.Warnings, "32-bit (armv7) kernel and userland: npm ships no armv7 ONNX Runtime; use the 64-bit Raspberry Pi OS, or an ONNX Runtime built from source for armhf")
	}
	p.Sensors = []SensorWant{
		{Source: "thermal", Kind: "thermal", Expected: true, Why: "cpu-thermal: the firmware throttles the CPU from 80 °C (85 °C hard)"},
		{Source: "cpufreq", Kind: "frequency", Expected: true, Why: "the CPU policy's frequency shows throttling and undervoltage capping"},
		{Source: "smart-plug", Kind: "power", Why: "the board has no power sensor in sysfs (the Pi 5 PMIC ADC is read with vcgencmd pmic_read_adc); configure a Shelly or Tasmota plug for wall power"},
	}
}

func buildRK3588(f *Facts, p *Plan, _ DetectOptions) {
	p.Providers = providers(ort.CPU)
	if p.Threads.Affinity == "" {
		// Every RK3588/RK3588S has four Cortex-A76 and four A55, but
		// without a trustworthy capacity or CPU part we cannot tell which
		// CPU numbers they are: four threads, unpinned, is safe.
		p.Threads = ThreadPlan{IntraOp: min(4, max(f.CPU.Processors, 1)), Why: "cores could not be told apart (no valid cpu_capacity or CPU part): 4 threads (the A76 count), unpinned"}
		p.Warnings = append(p.Warnings, "RK3588 without distinguishable big cores: threads not pinned to the A76 cores; check /sys/devices/system/cpu/cpu*/cpu_capacity")
	}
	p.Notes = append(p.Notes,
		"the RK3588 NPU (RKNPU2, 6 TOPS int8) has no ONNX Runtime execution provider: to use it, convert the ONNX model with Rockchip's rknn-toolkit2 and run it with the RKNN runtime (librknnrt); through this SDK models run on the Cortex-A76 cores",
		"the Mali-G610 GPU has no ONNX Runtime provider in the standard builds either")
	p.Sensors = []SensorWant{
		{Source: "thermal", Kind: "thermal", Expected: true, Why: "bigcore0/1-thermal, littlecore-thermal, npu-thermal, gpu-thermal, soc-thermal"},
		{Source: "cpufreq", Kind: "frequency", Expected: true, Why: "three policies (A55, A76 pair 1, pair 2): the A76 policies cap first when hot"},
		{Source: "devfreq", Kind: "frequency", Why: "fb000000.gpu and fdab0000.npu devfreq nodes"},
		{Source: "smart-plug", Kind: "power", Why: "no power sensor on RK3588 boards: configure a Shelly or Tasmota plug for wall power"},
	}
}

func matchQualcomm(f *Facts) []string {
	var ev []string
	if c := f.compatibleWith("qcom,"); c != "" {
		ev = append(ev, fmt.Sprintf("/proc/device-tree/compatible has %q", c))
	}
	if strings.Contains(strings.ToLower(f.DMI.SysVendor), "qualcomm") {
		ev = append(ev, fmt.Sprintf("DMI sys_vendor is %q", f.DMI.SysVendor))
	}
	return ev
}

func buildQualcomm(f *Facts, p *Plan, _ DetectOptions) {
	p.Providers = []ort.ProviderConfig{{Name: ort.QNN, Options: map[string]string{"backend_path": "libQnnHtp.so"}}, {Name: ort.CPU}}
	p.Notes = append(p.Notes,
		"QNN needs an ONNX Runtime built with the QNN provider and the QNN SDK's libQnnHtp.so (with its libQnnHtpV*Stub.so and skel) on the library path; the npm library has no QNN",
		"the HTP backend runs only models with static shapes and QDQ int8: one-shot bundles whose inputs are all fixed-size and that were quantised with `edgeinfer quantize --scheme qdq-int8 --calibrate DIR --reduce-range=false` qualify (QNNQualifies checks a model); decoder bundles do not (symbolic batch and sequence, the ai.edgeinfer paged attention) and run on the CPU")
	if f.QualcommDSP == "" {
		p.Warnings = append(p.Warnings, "no FastRPC device (/dev/fastrpc-cdsp): the HTP is unreachable, QNN will fail and the CPU will run; check the DSP firmware and the fastrpc driver")
	} else {
		p.RecognisedBy = append(p.RecognisedBy, "Hexagon DSP device "+f.QualcommDSP)
	}
	p.Sensors = []SensorWant{
		{Source: "thermal", Kind: "thermal", Expected: true, Why: "cpu*-thermal, nsp*-thermal (the HTP) zones"},
		{Source: "battery", Kind: "power", Why: "a laptop's battery gives system power while discharging; otherwise configure a smart plug"},
	}
}

func matchNVIDIA(f *Facts) []string {
	if f.arch() != "amd64" || len(f.NVIDIA) == 0 {
		return nil
	}
	return slices.Clone(f.NVIDIA)
}

func buildNVIDIA(f *Facts, p *Plan, opts DetectOptions) {
	p.Providers = []ort.ProviderConfig{tensorRT(opts), {Name: ort.CUDA}, {Name: ort.CPU}}
	if isCoreUltra(f) {
		p.Providers = slices.Insert(p.Providers, 2, ort.ProviderConfig{Name: ort.OpenVINO, Options: map[string]string{"device_type": "NPU"}})
		p.Notes = append(p.Notes, "an Intel Core Ultra with an NVIDIA GPU: the GPU first, OpenVINO's NPU after it")
	}
	p.Notes = append(p.Notes,
		"TensorRT and CUDA need libonnxruntime_providers_{tensorrt,cuda,shared}.so of the same ONNX Runtime version beside libonnxruntime.so, and the CUDA runtime, cuBLAS, cuDNN 9 (and TensorRT) libraries they link; the npm onnxruntime-node library has both compiled in but ships no provider libraries (platforms/gpu/check.sh fetches a 1.29 set)")
	p.Sensors = []SensorWant{
		{Source: "nvml", Kind: "power", Expected: true, Why: "the GPU's energy counter through NVML (build with -tags nvml; needs the NVIDIA driver's libnvidia-ml.so.1)"},
		{Source: "rapl", Kind: "power", Why: "the CPU package through RAPL powercap (root-only since Linux 5.10)"},
		{Source: "thermal", Kind: "thermal", Why: "x86_pkg_temp and ACPI zones"},
	}
}

func isCoreUltra(f *Facts) bool { return strings.Contains(f.CPU.Model, "Core(TM) Ultra") }

func matchCoreUltra(f *Facts) []string {
	var ev []string
	if isCoreUltra(f) {
		ev = append(ev, fmt.Sprintf("/proc/cpuinfo model name is %q", f.CPU.Model))
	}
	if f.IntelNPU != "" {
		ev = append(ev, "Intel NPU "+f.IntelNPU)
	}
	return ev
}

func buildCoreUltra(f *Facts, p *Plan, _ DetectOptions) {
	ov := func(dev string) ort.ProviderConfig {
		return ort.ProviderConfig{Name: ort.OpenVINO, Options: map[string]string{"device_type": dev}}
	}
	p.Providers = []ort.ProviderConfig{ov("NPU"), ov("GPU"), ov("CPU"), {Name: ort.CPU}}
	p.Notes = append(p.Notes,
		"OpenVINO needs an ONNX Runtime built with the OpenVINO provider (libonnxruntime_providers_openvino.so) and the OpenVINO runtime; the npm library has none",
		"the NPU compiles static shapes: one-shot models with fixed inputs suit it, decoders fall to the GPU (Arc iGPU) or the CPU")
	if f.IntelNPU == "" {
		p.Warnings = append(p.Warnings, "no Intel NPU device (/sys/class/accel/accel*/device/driver = intel_vpu): OpenVINO's NPU will fail; install the linux-npu-driver (kernel 6.3+ has intel_vpu)")
	}
	p.Sensors = []SensorWant{
		{Source: "rapl", Kind: "power", Expected: true, Why: "RAPL psys (the SoC platform, CPU+GPU+NPU) where present, else package-0; energy_uj is root-only since Linux 5.10"},
		{Source: "thermal", Kind: "thermal", Why: "x86_pkg_temp and ACPI zones"},
		{Source: "battery", Kind: "power", Why: "a laptop's battery gives system power while discharging"},
	}
}

func buildGeneric(f *Facts, p *Plan, _ DetectOptions) {
	p.Providers = ort.DefaultProviders()
	p.Notes = append(p.Notes, "board unknown: the full provider chain is tried (a provider the library lacks is skipped in microseconds) and the CPU runs what none takes")
	if f.arch() == "arm" {
		p.Warnings = append(p.Warnings, "32-bit arm: npm ships no armv7 ONNX Runtime library; build ONNX Runtime from source for armhf and set ONNXRUNTIME_LIB")
	}
	p.Sensors = []SensorWant{
		{Source: "rapl", Kind: "power", Why: "RAPL on x86 (root-only since Linux 5.10)"},
		{Source: "hwmon", Kind: "power", Why: "any hwmon power or energy channel"},
		{Source: "thermal", Kind: "thermal", Why: "any thermal zone"},
		{Source: "smart-plug", Kind: "power", Why: "wall power from a Shelly or Tasmota plug, where configured"},
	}
}
