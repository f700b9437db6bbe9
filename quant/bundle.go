package quant

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
)

// SidecarFile is the name of the quantisation record inside a bundle.
const SidecarFile = "quantization.json"

// Sidecar is quantization.json: the scheme, the reference the bundle was
// made from and compared with, the per-weight table and, when a quality
// report ran, its figures. The manifest's Quantization field carries the
// scheme alone; this file carries the evidence.
type Sidecar struct {
	Scheme    string    `json:"scheme"`
	Keep      []string  `json:"keep,omitempty"`
	Reference Reference `json:"reference"`
	Layers    []Layer   `json:"layers"`
	// BytesBefore and BytesAfter total the table's weights.
	BytesBefore int64    `json:"bytes_before"`
	BytesAfter  int64    `json:"bytes_after"`
	Quality     *Quality `json:"quality,omitempty"`
}

// Reference identifies the unquantised bundle: name, version and the sha256
// of its model file.
type Reference struct {
	Name         string `json:"name"`
	Version      string `json:"version"`
	Quantization string `json:"quantization"`
	ModelSHA256  string `json:"model_sha256"`
}

// Quality holds the figures of a quality report against the reference.
// Decoder fields are zero for one-shot models and the reverse.
type Quality struct {
	Text               string  `json:"text,omitempty"`
	Tokens             int     `json:"tokens,omitempty"`
	PerplexityRef      float64 `json:"perplexity_reference,omitempty"`
	PerplexityQuant    float64 `json:"perplexity_quantised,omitempty"`
	PerplexityDeltaPct float64 `json:"perplexity_delta_pct,omitempty"`
	Top1AgreementPct   float64 `json:"top1_agreement_pct,omitempty"`
	KL                 float64 `json:"kl,omitempty"`
	Cosine             float64 `json:"cosine,omitempty"`
	Samples            int     `json:"samples,omitempty"`
}

// QuantizeBundle writes a quantised copy of the bundle in inDir to outDir:
// the model through QuantizeFile, every other file of the bundle copied,
// quantization.json added, and the manifest resealed with Quantization set
// to the scheme and Version "<ref version>+<scheme>".
func QuantizeBundle(ctx context.Context, inDir, outDir string, opts Options) (*bundle.Bundle, *Sidecar, error) {
	ref, err := bundle.Load(inDir)
	if err != nil {
		return nil, nil, err
	}
	if ref.Manifest.Quantization != "" && ref.Manifest.Quantization != "fp32" {
		return nil, nil, fmt.Errorf("%w: %s is already quantised (%s): quantise the fp32 reference", ErrModel, inDir, ref.Manifest.Quantization)
	}
	if sameDir(inDir, outDir) {
		return nil, nil, fmt.Errorf("%w: --out must differ from --in", ErrModel)
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("quant: %w", err)
	}
	model := ref.Manifest.Model
	res, err := quantizeFile(ctx, ref.ModelPath(), filepath.Join(outDir, model), opts, !opts.PortableMatMul)
	if err != nil {
		return nil, nil, err
	}
	files := slices.Clone(res.Files)
	for _, f := range ref.Manifest.Files {
		if f.Path == model || f.Path == model+".data" || f.Path == SidecarFile || isExternalOf(f.Path, model) {
			continue
		}
		if err := copyFile(ref.Path(f.Path), filepath.Join(outDir, filepath.FromSlash(f.Path))); err != nil {
			return nil, nil, err
		}
		files = append(files, f.Path)
	}
	sc := &Sidecar{Scheme: res.Scheme, Keep: opts.Keep, Layers: res.Layers,
		Reference: Reference{Name: ref.Manifest.Name, Version: ref.Manifest.Version, Quantization: ref.Manifest.Quantization}}
	sc.BytesBefore, sc.BytesAfter, _ = Totals(res.Layers)
	for _, f := range ref.Manifest.Files {
		if f.Path == model {
			sc.Reference.ModelSHA256 = f.SHA256
		}
	}
	b, err := WriteSidecar(outDir, &ref.Manifest, sc, files)
	return b, sc, err
}

// isExternalOf reports whether path is the external data file the builder
// names after model ("model.onnx.data").
func isExternalOf(path, model string) bool { return path == model+".data" }

// WriteSidecar writes sc as outDir/quantization.json and seals outDir's
// manifest: a copy of refManifest with the scheme, a derived version and
// files (plus the sidecar). Call it again after adding Quality.
func WriteSidecar(outDir string, refManifest *bundle.Manifest, sc *Sidecar, files []string) (*bundle.Bundle, error) {
	data, err := json.MarshalIndent(sc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	if err := os.WriteFile(filepath.Join(outDir, SidecarFile), append(data, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	m := *refManifest
	m.Files = nil
	m.Quantization = sc.Scheme
	m.Version = sc.Reference.Version + "+" + sc.Scheme
	if !slices.Contains(files, SidecarFile) {
		files = append(slices.Clone(files), SidecarFile)
	}
	if err := bundle.Write(outDir, &m, files...); err != nil {
		return nil, err
	}
	return bundle.Load(outDir)
}

// ReadSidecar reads dir/quantization.json.
func ReadSidecar(dir string) (*Sidecar, error) {
	data, err := os.ReadFile(filepath.Join(dir, SidecarFile))
	if err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	sc := &Sidecar{}
	if err := json.Unmarshal(data, sc); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrModel, SidecarFile, err)
	}
	return sc, nil
}

func copyFile(from, to string) (err error) {
	in, err := os.Open(from)
	if err != nil {
		return fmt.Errorf("quant: %w", err)
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return fmt.Errorf("quant: %w", err)
	}
	out, err := os.Create(to)
	if err != nil {
		return fmt.Errorf("quant: %w", err)
	}
	defer func() {
		if cerr := out.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("quant: %w", cerr)
		}
	}()
	if _, err := io.Copy(out, in); err != nil {
		return fmt.Errorf("quant: copy %s: %w", from, err)
	}
	return nil
}

// sameDir reports whether two paths name the same directory.
func sameDir(a, b string) bool {
	x, errA := filepath.Abs(a)
	y, errB := filepath.Abs(b)
	return errA == nil && errB == nil && x == y
}
