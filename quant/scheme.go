package quant

import (
	"fmt"
	"strconv"
	"strings"
)

// Format is the stored form of a quantised weight.
type Format int

// Weight formats.
const (
	// FormatInt4 is com.microsoft.MatMulNBits with bits=4.
	FormatInt4 Format = iota + 1
	// FormatInt8 is com.microsoft.MatMulNBits with bits=8.
	FormatInt8
	// FormatFP16 stores weights as float16 and casts them to float32 in the
	// graph (ONNX Runtime folds the cast at load: the file halves, the
	// session's weight memory stays fp32).
	FormatFP16
	// FormatInt8PerChannel stores int8 weights with one symmetric scale per
	// output channel and runs them as com.microsoft.DynamicQuantizeMatMul
	// (activations quantised per call, MLAS's integer GEMM). On AVX2 CPUs it
	// runs synthetic-110m's projections faster than MatMulNBits bits=8, most
	// of all at batch 8, and slower than int4; BenchmarkDecodeRate
	// (runtime/engine) with EDGEINFER_BENCH_SCHEME=int8-pc, int8 or int4-b32
	// measures each on the machine at hand. Embedding tables stay
	// block-quantised (GatherBlockQuantized, BlockSize).
	FormatInt8PerChannel
)

// Scheme says how weights are quantised. It is plain data; the zero value is
// invalid — use ParseScheme or fill Format and BlockSize.
type Scheme struct {
	Format Format
	// BlockSize is the number of consecutive K elements sharing one scale
	// (int4/int8): 16, 32, 64, 128 or 256.
	BlockSize int
	// Asymmetric stores a zero point per block (min/max range) instead of
	// the symmetric default (zero point 8 for int4, 128 for int8).
	Asymmetric bool
	// AccuracyLevel is MatMulNBits' accuracy_level: 0 (unset) or 1 computes
	// in fp32, 4 quantises activations to int8 — the fast one on CPUs (an
	// integer dot product where level 1 dequantises to fp32) at ~1e-2 logit
	// noise.
	AccuracyLevel int
	// PadK pads K up to a multiple of BlockSize with zeros instead of
	// refusing such weights. MatMulNBits takes a partial last block (its B
	// is [N, ceil(K/bs), bs·bits/8]), so padding is exact.
	PadK bool
}

// DefaultAccuracyLevel is the accuracy level ParseScheme chooses for int4
// and int8: 4, int8 activations, the fast kernel.
const DefaultAccuracyLevel = 4

// ParseScheme parses "int4-b32", "int4-b64", "int4-b128", "int8" (block 32
// unless "-bN" follows), "int8-pc" (per output channel,
// DynamicQuantizeMatMul), "fp16", with optional suffixes "-asym" and
// "-accN" (e.g. "int4-b32-asym-acc1"; not for int8-pc). K padding is on.
func ParseScheme(s string) (Scheme, error) {
	parts := strings.Split(strings.ToLower(strings.TrimSpace(s)), "-")
	var sc Scheme
	switch parts[0] {
	case "int4":
		sc = Scheme{Format: FormatInt4, BlockSize: 32, AccuracyLevel: DefaultAccuracyLevel}
	case "int8":
		sc = Scheme{Format: FormatInt8, BlockSize: 32, AccuracyLevel: DefaultAccuracyLevel}
	case "fp16":
		sc = Scheme{Format: FormatFP16}
	default:
		return Scheme{}, fmt.Errorf("%w: %q (want int4-b32|int4-b64|int4-b128|int8|fp16)", ErrScheme, s)
	}
	sc.PadK = true
	for _, p := range parts[1:] {
		switch {
		case p == "pc" && sc.Format == FormatInt8 && len(parts) == 2:
			sc = Scheme{Format: FormatInt8PerChannel, BlockSize: 32, PadK: true}
		case p == "asym" && sc.Format != FormatFP16:
			sc.Asymmetric = true
		case strings.HasPrefix(p, "acc") && sc.Format != FormatFP16:
			n, err := strconv.Atoi(p[3:])
			if err != nil {
				return Scheme{}, fmt.Errorf("%w: %q: bad accuracy level %q", ErrScheme, s, p)
			}
			sc.AccuracyLevel = n
		case strings.HasPrefix(p, "b") && sc.Format != FormatFP16:
			n, err := strconv.Atoi(p[1:])
			if err != nil {
				return Scheme{}, fmt.Errorf("%w: %q: bad block size %q", ErrScheme, s, p)
			}
			sc.BlockSize = n
		default:
			return Scheme{}, fmt.Errorf("%w: %q: unknown part %q", ErrScheme, s, p)
		}
	}
	return sc, sc.Validate()
}

// Validate checks the block size and accuracy level.
func (s Scheme) Validate() error {
	switch s.Format {
	case FormatFP16:
		return nil
	case FormatInt4, FormatInt8, FormatInt8PerChannel:
	default:
		return fmt.Errorf("%w: unknown format %d", ErrScheme, s.Format)
	}
	switch s.BlockSize {
	case 16, 32, 64, 128, 256:
	default:
		return fmt.Errorf("%w: block size %d (want 16, 32, 64, 128 or 256)", ErrScheme, s.BlockSize)
	}
	if s.AccuracyLevel < 0 || s.AccuracyLevel > 4 {
		return fmt.Errorf("%w: accuracy level %d (want 0..4)", ErrScheme, s.AccuracyLevel)
	}
	return nil
}

// Bits is the weight width: 4, 8 or 16.
func (s Scheme) Bits() int {
	switch s.Format {
	case FormatInt4:
		return 4
	case FormatInt8, FormatInt8PerChannel:
		return 8
	}
	return 16
}

// String is the canonical name recorded in manifests, e.g. "int4-b32-acc4",
// "int8-b32-asym-acc4", "fp16". ParseScheme(s.String()) gives s back.
func (s Scheme) String() string {
	switch s.Format {
	case FormatFP16:
		return "fp16"
	case FormatInt8PerChannel:
		return "int8-pc"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "int%d-b%d", s.Bits(), s.BlockSize)
	if s.Asymmetric {
		b.WriteString("-asym")
	}
	fmt.Fprintf(&b, "-acc%d", s.AccuracyLevel)
	return b.String()
}
