package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"image"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/npy"
	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/quant"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/runtime/plugin"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/prepost"
)

// The two bundles the station imports into its store: the detector with
// its pre plugin (imageprep, spec paddle-det) and post plugin (dbpost),
// the recogniser with its post plugin (ctc) and dictionary.
const (
	detBundle = "paddleocr-det"
	recBundle = "paddleocr-rec"
	dictFile  = "ppocr_keys_v1.txt"
)

// ImportModels assembles the two bundles from the PaddleOCR v4 files in
// modelDir (platforms/models/fetch.sh installs them under paddleocr/) and
// the plugins in pluginDir (make plugins), and imports both into st. The
// station then reads everything from the store, so it runs offline and
// only on files whose sha256 the store verified.
func ImportModels(ctx context.Context, st *store.Store, models Models, pluginDir string) error {
	modelDir := models.Dir
	det, rec := cmp.Or(models.Det, filepath.Join(modelDir, "ch_PP-OCRv4_det_infer.onnx")), cmp.Or(models.Rec, filepath.Join(modelDir, "ch_PP-OCRv4_rec_infer.onnx"))
	tmp, err := os.MkdirTemp("", "factory-ocr-bundles")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for _, b := range []struct {
		name  string
		files map[string]string // bundle path <- source
	}{
		{detBundle, map[string]string{
			"model.onnx": det,
			"pre.wasm":   filepath.Join(pluginDir, "imageprep.wasm"),
			"post.wasm":  filepath.Join(pluginDir, "dbpost.wasm"),
		}},
		{recBundle, map[string]string{
			"model.onnx": rec,
			"post.wasm":  filepath.Join(pluginDir, "ctc.wasm"),
			dictFile:     filepath.Join(modelDir, dictFile),
		}},
	} {
		dir := filepath.Join(tmp, b.name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		var names []string
		for dst, src := range b.files {
			data, err := os.ReadFile(src)
			if err != nil {
				return fmt.Errorf("factory-ocr: %w (platforms/models/fetch.sh fetches the models, make plugins builds the .wasm files)", err)
			}
			if err := os.WriteFile(filepath.Join(dir, dst), data, 0o644); err != nil {
				return err
			}
			names = append(names, dst)
		}
		slices.Sort(names)
		q := "fp32"
		if strings.Contains(filepath.Base(b.files["model.onnx"]), "int8") {
			q = quant.QDQScheme
		}
		m := &bundle.Manifest{Name: b.name, Version: "4", Kind: bundle.KindOneShot, Model: "model.onnx",
			Quantization: q, CreatedBy: "examples/factory-ocr ImportModels"}
		if err := bundle.Write(dir, m, names...); err != nil {
			return err
		}
		if _, err := st.Import(ctx, dir, nil); err != nil {
			return err
		}
	}
	return nil
}

// Models names the station's model files: Det and Rec, or when empty the
// PaddleOCR v4 files in Dir.
type Models struct{ Dir, Det, Rec string }

// Station reads labels: detector and recogniser sessions on ONNX Runtime
// and the three plugins, all loaded from the store.
type Station struct {
	det, rec       *ort.Session
	prep, db, ctc  *plugin.Plugin
	dict           abi.Tensor
	Provider       ort.Provider
	DetVer, RecVer string
	// DumpRec, when set, is a directory each recogniser input is written
	// to as NNNN.npy (calibration data).
	DumpRec string
	dumped  int
}

// OpenStation loads the station's models and plugins from st.
func OpenStation(ctx context.Context, st *store.Store, threads int) (_ *Station, err error) {
	read := func(ref, path string) []byte {
		if err != nil {
			return nil
		}
		var b []byte
		b, err = st.ReadFile(ctx, ref, path)
		return b
	}
	detModel, recModel := read(detBundle, "model.onnx"), read(recBundle, "model.onnx")
	prep, db, ctc, dict := read(detBundle, "pre.wasm"), read(detBundle, "post.wasm"), read(recBundle, "post.wasm"), read(recBundle, dictFile)
	if err != nil {
		return nil, fmt.Errorf("factory-ocr: %w (import the models first: ImportModels)", err)
	}
	s := &Station{dict: abi.Str("dict", string(dict))}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.Close(context.WithoutCancel(ctx)))
		}
	}()
	opts := ort.Options{IntraOpThreads: threads}
	if s.det, err = ort.NewSession(ctx, detModel, opts); err != nil {
		return nil, err
	}
	if s.rec, err = ort.NewSession(ctx, recModel, opts); err != nil {
		return nil, err
	}
	s.Provider = s.det.Provider()
	cfg := plugin.Config{MaxInstances: 1, CallTimeout: 30 * time.Second}
	for _, p := range []struct {
		dst  **plugin.Plugin
		name string
		wasm []byte
	}{{&s.prep, "imageprep", prep}, {&s.db, "dbpost", db}, {&s.ctc, "ctc", ctc}} {
		if *p.dst, err = plugin.Load(ctx, p.name, p.wasm, cfg); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Close releases the sessions and plugins; it may be called again.
func (s *Station) Close(ctx context.Context) error {
	var errs []error
	for _, p := range []**plugin.Plugin{&s.prep, &s.db, &s.ctc} {
		if *p != nil {
			errs = append(errs, (*p).Close(ctx))
			*p = nil
		}
	}
	for _, x := range []**ort.Session{&s.det, &s.rec} {
		if *x != nil {
			errs = append(errs, (*x).Close())
			*x = nil
		}
	}
	return errors.Join(errs...)
}

// Line is one text line read off a label.
type Line struct {
	Text  string          `json:"text"`
	Score float64         `json:"score"`
	Box   image.Rectangle `json:"box"`
	// Quad is the rotated box the line was read from (corners top-left,
	// top-right, bottom-right, bottom-left, in pixels).
	Quad prepost.Quad `json:"quad"`
}

// Read finds the text boxes in a JPEG/PNG and reads each, top to bottom.
func (s *Station) Read(ctx context.Context, img []byte) ([]Line, error) {
	pre, err := s.prep.Call(ctx, []abi.Tensor{abi.Bytes("image", img), abi.Str("arg.spec", "paddle-det"), abi.Str("arg.output", "x")})
	if err != nil {
		return nil, err
	}
	x, _ := abi.Find(pre, "x")
	src, _ := abi.Find(pre, "src_size")
	m, err := run(ctx, s.det, "x", x.Shape, x.Data, "sigmoid_0.tmp_0")
	if err != nil {
		return nil, err
	}
	post, err := s.db.Call(ctx, []abi.Tensor{m, src})
	if err != nil {
		return nil, err
	}
	qt, _ := abi.Find(post, "quads")
	coords, err := qt.Float32s()
	if err != nil || len(coords)%8 != 0 {
		return nil, fmt.Errorf("factory-ocr: dbpost returned %v, want quads float32 [N,4,2]", qt)
	}
	decoded, err := prepost.DecodeImage(img)
	if err != nil {
		return nil, err
	}
	var lines []Line
	for i := 0; i+7 < len(coords); i += 8 {
		var q prepost.Quad
		for k := range 4 {
			q[k] = [2]float64{float64(coords[i+2*k]), float64(coords[i+2*k+1])}
		}
		if w, h := q.Size(); w < 4 || h < 4 {
			continue
		}
		l, err := s.readBox(ctx, decoded, q)
		if err != nil {
			return nil, err
		}
		if l.Text != "" {
			lines = append(lines, l)
		}
	}
	return rows(lines), nil
}

// rows merges boxes that sit on one printed line (the detector may split
// "MFG 2026-05-18" at the gap) left to right, and orders the lines top to
// bottom: a box joins a row when its centre lies within half the first
// box's height of that box's centre line (measured across the line, so
// that tilted lines, whose upright bounds overlap, stay apart).
func rows(boxes []Line) []Line {
	centre := func(l Line) [2]float64 {
		var c [2]float64
		for _, p := range l.Quad {
			c[0], c[1] = c[0]+p[0]/4, c[1]+p[1]/4
		}
		return c
	}
	sort.SliceStable(boxes, func(i, j int) bool { return centre(boxes[i])[1] < centre(boxes[j])[1] })
	used := make([]bool, len(boxes))
	var out []Line
	for i := range boxes {
		if used[i] {
			continue
		}
		c := centre(boxes[i])
		q := boxes[i].Quad
		w, h := q.Size()
		// the unit normal of the first box's top edge
		nx, ny := -(q[1][1]-q[0][1])/w, (q[1][0]-q[0][0])/w
		row := []Line{boxes[i]}
		for j := i + 1; j < len(boxes); j++ {
			cj := centre(boxes[j])
			if !used[j] && math.Abs((cj[0]-c[0])*nx+(cj[1]-c[1])*ny) < h/2 {
				used[j] = true
				row = append(row, boxes[j])
			}
		}
		ux, uy := (q[1][0]-q[0][0])/w, (q[1][1]-q[0][1])/w
		along := func(l Line) float64 { cl := centre(l); return cl[0]*ux + cl[1]*uy }
		sort.SliceStable(row, func(a, b int) bool { return along(row[a]) < along(row[b]) })
		l := row[0]
		for _, r := range row[1:] {
			l.Text += " " + r.Text
			l.Score = min(l.Score, r.Score)
			l.Box = l.Box.Union(r.Box)
		}
		out = append(out, l)
	}
	return out
}

// readBox prepares a rotated box as PaddleOCR's recogniser expects it,
// turned upright (height 48, width from the aspect ratio up to 640, NCHW in
// [-1,1]; prepost.PreprocessQuad), runs it and decodes the output with the
// ctc plugin.
func (s *Station) readBox(ctx context.Context, img image.Image, q prepost.Quad) (Line, error) {
	qw, qh := q.Size()
	w := min(640, max(16, (int(48*qw/qh)+7)/8*8))
	spec := prepost.ImageSpec{Width: w, Height: 48, NCHW: true, Mean: [3]float64{0.5, 0.5, 0.5}, Std: [3]float64{0.5, 0.5, 0.5}}
	x := prepost.PreprocessQuad(img, q, spec)
	if s.DumpRec != "" {
		s.dumped++
		name := filepath.Join(s.DumpRec, fmt.Sprintf("%04d.npy", s.dumped))
		if err := os.WriteFile(name, npy.EncodeFloat32([]int64{1, 3, 48, int64(w)}, x), 0o644); err != nil {
			return Line{}, err
		}
	}
	p, err := run(ctx, s.rec, "x", []int64{1, 3, 48, int64(w)}, abi.F32("", nil, x).Data, "softmax_11.tmp_0")
	if err != nil {
		return Line{}, err
	}
	out, err := s.ctc.Call(ctx, []abi.Tensor{p, s.dict})
	if err != nil {
		return Line{}, err
	}
	text, _ := abi.Find(out, "text")
	score, _ := abi.Find(out, "score")
	t, _ := text.Text()
	sc, _ := score.Float32s()
	l := Line{Text: t, Box: q.Bounds().Intersect(img.Bounds()), Quad: q}
	if len(sc) == 1 {
		l.Score = float64(sc[0])
	}
	return l, nil
}

// run feeds one float32 input to s and returns the named output.
func run(ctx context.Context, s *ort.Session, in string, shape []int64, data []byte, out string) (abi.Tensor, error) {
	x, err := ort.CopyBytes(ort.Float32, shape, data)
	if err != nil {
		return abi.Tensor{}, err
	}
	defer x.Close()
	res, err := s.Run(ctx, map[string]*ort.Tensor{in: x})
	if err != nil {
		return abi.Tensor{}, err
	}
	defer ort.CloseAll(res)
	t, ok := res[out]
	if !ok {
		return abi.Tensor{}, fmt.Errorf("factory-ocr: model has no output %q", out)
	}
	return abi.Tensor{Name: out, DType: abi.Float32, Shape: t.Shape(), Data: slices.Clone(t.Bytes())}, nil
}

// Normalize makes a reading comparable with the printed text: full-width
// ASCII forms (the Chinese model's dictionary has both "：" and ":") become
// ASCII, and spaces are dropped (the recogniser often merges or omits
// them; a label's fields are separated by lines, not spaces).
func Normalize(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r >= 0xFF01 && r <= 0xFF5E {
			r -= 0xFEE0
		}
		if r == ' ' || r == '\u3000' || r == '\t' {
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// CharErrors is the edit (Levenshtein) distance between the normalised
// reading and the expected text, in characters, and the expected length.
func CharErrors(got, want string) (errs, n int) {
	a, b := []rune(Normalize(strings.TrimSpace(got))), []rune(Normalize(strings.TrimSpace(want)))
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)], len(b)
}
