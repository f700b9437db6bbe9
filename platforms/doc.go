// Package platforms recognises the board the SDK runs on and chooses, for
// it, the execution-provider order, the intra-op thread plan (which cores,
// how many), the KV cache budget from the memory available, and the power
// and thermal sensors worth reading; and it explains every choice.
//
// Detection reads only files, all under a root directory ("/" on a device,
// a fixture tree under testdata/ in tests): /proc/device-tree/model and
// compatible, /sys/class/dmi/id, /proc/cpuinfo,
// /sys/devices/system/cpu/cpu*/cpu_capacity, /proc/meminfo,
// /etc/nv_tegra_release and the PCI and accel device lists. Detection never
// fails: a board it does not know gets the generic profile of its CPU
// architecture and says so, and a file that lies (a Jetson model with no
// INA3221 rails, garbage in cpu_capacity) gives a warning and a safe choice.
//
// Profiles: Jetson Orin (JetPack 6: TensorRT, CUDA, CPU; INA3221 rails,
// GPU devfreq, thermal zones), Raspberry Pi 5 and 4 (XNNPACK where the
// library has it, CPU; thermal; no power sensor), RK3588/RK3588S (CPU with
// intra-op threads on the Cortex-A76 cores; its NPU has no ONNX Runtime
// provider), Qualcomm (QNN HTP for static-shape QDQ int8 models), Intel Core
// Ultra (OpenVINO NPU, GPU, CPU), x86 with an NVIDIA GPU (TensorRT, CUDA;
// NVML power), and generic Linux arm64, arm and amd64.
//
// Apply puts a Plan onto an engine configuration without overwriting what
// the configuration already sets: explicit settings are overrides, and
// Matrix shows, for the report's version matrix, each choice with where it
// came from.
//
// Everything here is plain data and safe for concurrent use once built.
package platforms
