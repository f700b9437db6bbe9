package ort

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"strconv"
	"strings"
	"time"

	onnx "github.com/yalue/onnxruntime_go"
)

// Provider names an ONNX Runtime execution provider.
type Provider string

// The execution providers this package can append, in the default order of
// preference: the most specialised accelerator first, the CPU last.
const (
	TensorRT Provider = "TensorRT"
	CUDA     Provider = "CUDA"
	OpenVINO Provider = "OpenVINO"
	QNN      Provider = "QNN"
	CoreML   Provider = "CoreML"
	XNNPACK  Provider = "XNNPACK"
	DirectML Provider = "DirectML"
	CPU      Provider = "CPU"
)

var allProviders = []Provider{TensorRT, CUDA, OpenVINO, QNN, CoreML, XNNPACK, DirectML, CPU}

func (p Provider) known() bool {
	for _, k := range allProviders {
		if strings.EqualFold(string(k), string(p)) {
			return true
		}
	}
	return false
}

// canonical maps a case-insensitive spelling ("cuda") to the constant.
func (p Provider) canonical() Provider {
	for _, k := range allProviders {
		if strings.EqualFold(string(k), string(p)) {
			return k
		}
	}
	return p
}

// ParseProviders parses a comma-separated list such as "cuda,cpu".
func ParseProviders(list string) ([]ProviderConfig, error) {
	var out []ProviderConfig
	for f := range strings.SplitSeq(list, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p := Provider(f)
		if !p.known() {
			return nil, fmt.Errorf("%w: unknown execution provider %q (known: %v)", ErrInvalidOptions, f, allProviders)
		}
		out = append(out, ProviderConfig{Name: p.canonical()})
	}
	return out, nil
}

// ProviderConfig is one entry of the provider chain with its options, as
// documented by ONNX Runtime for that provider (e.g. CUDA "device_id",
// TensorRT "trt_fp16_enable", OpenVINO "device_type", QNN
// "backend_path"). For CoreML they are the V2 option keys; for DirectML the
// only key is "device_id".
type ProviderConfig struct {
	Name    Provider          `json:"name" yaml:"name"`
	Options map[string]string `json:"options,omitempty" yaml:"options,omitempty"`
}

// DefaultProviders is the full preference chain: TensorRT, CUDA, OpenVINO,
// QNN, CoreML, XNNPACK, DirectML, CPU. Providers the loaded library lacks
// fail to append in microseconds, so trying them is cheap.
func DefaultProviders() []ProviderConfig {
	out := make([]ProviderConfig, len(allProviders))
	for i, p := range allProviders {
		out[i] = ProviderConfig{Name: p}
	}
	return out
}

// ProviderAttempt records one provider of the chain: chosen, or skipped and
// why.
type ProviderAttempt struct {
	Provider Provider `json:"provider"`
	// Chosen is true for the provider the session runs on.
	Chosen bool `json:"chosen"`
	// Reason is a short explanation of the skip ("provider library not
	// found"); empty when chosen.
	Reason string `json:"reason,omitempty"`
	// Err is the full error behind Reason (in JSON as its message, see
	// MarshalJSON).
	Err error `json:"-"`
	// Duration is the time spent on this attempt (append, session
	// creation, probe).
	Duration time.Duration `json:"-"`
}

// MarshalJSON writes the attempt for reports: the error as its message and
// the duration in milliseconds (an error value and nanoseconds would read
// as {} and 1234567).
func (a ProviderAttempt) MarshalJSON() ([]byte, error) {
	type plain ProviderAttempt
	out := struct {
		plain
		Error string  `json:"error,omitempty"`
		MS    float64 `json:"duration_ms"`
	}{plain: plain(a), MS: float64(a.Duration) / float64(time.Millisecond)}
	if a.Err != nil {
		out.Error = a.Err.Error()
	}
	return json.Marshal(out)
}

func (a ProviderAttempt) String() string {
	if a.Chosen {
		return fmt.Sprintf("%s: chosen (%v)", a.Provider, a.Duration.Round(time.Microsecond))
	}
	return fmt.Sprintf("%s: %s", a.Provider, a.Reason)
}

// appendProvider adds p to so. CPU needs nothing: ONNX Runtime always
// appends it last, for any node the chosen provider cannot take. A core
// built without the provider can still take it as a plug-in library beside
// it (see plugin_ep.go); the plug-in's error then says why it did not.
func appendProvider(so *onnx.SessionOptions, p ProviderConfig) error {
	err := appendBuiltin(so, p)
	if notInBuild(err) {
		if lib := pluginLibrary(p.Name.canonical()); lib != "" {
			return appendPlugin(so, p, lib)
		}
	}
	return err
}

func appendBuiltin(so *onnx.SessionOptions, p ProviderConfig) error {
	opts := p.Options
	switch p.Name.canonical() {
	case CPU:
		return nil
	case CUDA:
		co, err := onnx.NewCUDAProviderOptions()
		if err != nil {
			return err
		}
		defer co.Destroy()
		if len(opts) > 0 {
			if err := co.Update(opts); err != nil {
				return err
			}
		}
		return so.AppendExecutionProviderCUDA(co)
	case TensorRT:
		to, err := onnx.NewTensorRTProviderOptions()
		if err != nil {
			return err
		}
		defer to.Destroy()
		if len(opts) > 0 {
			if err := to.Update(opts); err != nil {
				return err
			}
		}
		return so.AppendExecutionProviderTensorRT(to)
	case OpenVINO:
		return so.AppendExecutionProviderOpenVINO(maps.Clone(opts))
	case CoreML:
		return so.AppendExecutionProviderCoreMLV2(maps.Clone(opts))
	case DirectML:
		id := 0
		if s, ok := opts["device_id"]; ok {
			v, err := strconv.Atoi(s)
			if err != nil {
				return fmt.Errorf("%w: DirectML device_id %q", ErrInvalidOptions, s)
			}
			id = v
		}
		return so.AppendExecutionProviderDirectML(id)
	case QNN:
		return so.AppendExecutionProvider("QNN", opts)
	case XNNPACK:
		return so.AppendExecutionProvider("XNNPACK", opts)
	}
	return fmt.Errorf("%w: unknown execution provider %q", ErrInvalidOptions, p.Name)
}

// providerLibraries are the plug-in libraries ONNX Runtime loads for the
// providers built as separate shared objects; they sit beside
// libonnxruntime.so with libonnxruntime_providers_shared.so.
var providerLibraries = map[Provider]string{
	TensorRT: "libonnxruntime_providers_tensorrt.so",
	CUDA:     "libonnxruntime_providers_cuda.so",
	OpenVINO: "libonnxruntime_providers_openvino.so",
	QNN:      "libonnxruntime_providers_qnn.so",
}

var missingLibRE = regexp.MustCompile(`(lib[A-Za-z0-9_]+\.(?:so|dylib|dll)[.0-9]*)[^:]*: cannot open shared object file`)

// skipReason condenses ONNX Runtime's long failure messages into the
// phrase a user needs ("provider library not found: libX.so").
func skipReason(p Provider, err error) string {
	msg := err.Error()
	low := strings.ToLower(msg)
	switch {
	case strings.Contains(low, "failed to load shared library"):
		if lib := providerLibraries[p]; lib != "" {
			return "provider library not found (" + lib + ")"
		}
		return "provider library not found"
	case missingLibRE.MatchString(msg):
		lib := missingLibRE.FindStringSubmatch(msg)[1]
		if !strings.HasPrefix(lib, "libonnxruntime_providers") {
			return "a library it links is missing (" + lib + ")"
		}
		return "provider library not found (" + lib + ")"
	case strings.Contains(low, "not supported in this build"),
		strings.Contains(low, "is not supported"),
		strings.Contains(low, "not available"),
		strings.Contains(low, "not enabled"),
		strings.Contains(low, "does not support"):
		return "not supported by this ONNX Runtime build"
	case strings.Contains(low, "symbol lookup"), strings.Contains(low, "undefined symbol"):
		return "not supported by this ONNX Runtime build (" + firstLine(msg) + ")"
	}
	return firstLine(msg)
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
