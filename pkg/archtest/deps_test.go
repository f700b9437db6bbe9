package archtest

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/edgeinfer/edgeinfer"

type goPackage struct {
	ImportPath string
	Deps       []string
	Imports    []string
}

// listPackages runs `go list -deps`-style queries over every production
// package of the module (tests are not included: -test is not passed).
func listPackages(t *testing.T) []goPackage {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Deps,Imports", module+"/...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	var pkgs []goPackage
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p goPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// rule: only `allowed` may depend (directly or not) on `dep`. A package that
// imports an allowed package inherits the dependency legitimately, so the
// check is on direct imports.
type importRule struct {
	dep     string   // import path prefix that is restricted
	allowed []string // packages that may import it directly
}

var importRules = []importRule{
	// one cgo boundary: everything native goes through runtime/ort
	{dep: "github.com/yalue/onnxruntime_go", allowed: []string{module + "/runtime/ort"}},
	// one owner of the database file format
	{dep: "go.etcd.io/bbolt", allowed: []string{module + "/pkg/store"}},
	// go-tuf pulls sigstore and protobuf (~7 MB of binary): only the update
	// agent and the fleet side that signs releases may import it.
	{dep: "github.com/theupdateframework/go-tuf", allowed: []string{module + "/update", module + "/update/fleet"}},
	{dep: "github.com/sigstore/", allowed: []string{module + "/update/fleet"}},
	// One MQTT connection per device: the link owns paho, and telemetry,
	// commands and updates share its connection, outbox and topics.
	{dep: "github.com/eclipse/paho.mqtt.golang", allowed: []string{module + "/pkg/link"}},
	// One package owns the WebAssembly sandbox, so its limits (memory cap,
	// deadlines, grants) cannot be bypassed by another caller of wazero.
	{dep: "github.com/tetratelabs/wazero", allowed: []string{module + "/runtime/plugin"}},
}

// linkRule: pkg must not depend, even indirectly, on anything under deps.
type linkRule struct {
	pkg    string
	deps   []string
	reason string
}

var linkRules = []linkRule{
	{module + "/runtime/engine", []string{"google.golang.org/protobuf", module + "/pkg/onnx"},
		"the device links no protobuf runtime or graph builder: model metadata is read by runtime/ort's own wire reader, bundles by pkg/bundle (builders live in pkg/bundle/build)"},
	{module + "/runtime/engine", []string{module + "/quant", module + "/runtime/loadgen"},
		"quantisation and the benchmark harness are offline and test tools built on the engine, never under it"},
	{module + "/runtime/engine", []string{"github.com/theupdateframework/go-tuf", "github.com/eclipse/paho.mqtt.golang"},
		"TUF metadata (sigstore, protobuf: megabytes) and MQTT are the update agent's: an app that only infers does not carry them"},
	{module + "/runtime/internal/sched", []string{module + "/runtime/ort", "github.com/yalue/"},
		"the scheduler is pure Go: it drives Decoder and Oneshot interfaces, so it is tested with fakes and never waits on cgo"},
	{module + "/update/fleet", []string{module + "/runtime/engine", module + "/runtime/ort", "github.com/yalue/"},
		"the fleet side runs no model: it builds with CGO_ENABLED=0 (TestFleetWithoutCgo); the engine is reached through runtime/device only"},
	{module + "/update/rollout", []string{module + "/runtime/engine", module + "/runtime/ort", "github.com/yalue/"},
		"the device's rollout side is cgo-free like the agent; the swap and telemetry adapters are runtime/device's"},
	{module + "/pkg/bundle", []string{module + "/pkg/onnx", "google.golang.org/protobuf"},
		"the bundle reader is what a device links; building bundles (ONNX graphs, Hugging Face imports) is pkg/bundle/build's"},
}

func TestLinks(t *testing.T) {
	pkgs := listPackages(t)
	byPath := map[string]goPackage{}
	for _, p := range pkgs {
		byPath[p.ImportPath] = p
	}
	for _, r := range linkRules {
		p, ok := byPath[r.pkg]
		if !ok {
			t.Errorf("rule for %s: no such package", r.pkg)
			continue
		}
		for _, d := range p.Deps {
			for _, bad := range r.deps {
				if strings.HasPrefix(d, bad) {
					t.Errorf("%s depends on %s: %s", r.pkg, d, r.reason)
				}
			}
		}
	}
}

// layers, bottom to top: a package may import only packages of its own or
// a lower layer. The longest matching prefix decides; the folders are the
// house's floors, and a package's floor is where it sits, with no
// exceptions by name.
var layers = []struct {
	prefix string
	layer  int
	why    string
}{
	{"pkg/", 0, "leaves: formats, the store, metrics, sensors, the MQTT link; they import nothing above them"},
	{"quant", 1, "offline quantisation of ONNX graphs (pkg/onnx)"},
	{"runtime/", 2, "the engine's parts: ONNX Runtime, tokenizer, plugins, scheduler, KV cache"},
	{"runtime/engine", 3, "the engine: what an application that only infers imports"},
	{"update", 4, "updates and the fleet: cgo-free, they drive the engine only through the device"},
	{"platforms", 4, "board profiles: probes over the engine and ONNX Runtime"},
	{"runtime/serve", 5, "the local HTTP API: a front end over the engine"},
	{"runtime/loadgen", 5, "the load generator: drives the engine in-process or over HTTP"},
	{"runtime/device", 6, "the whole device: engine, HTTP API, link, updates, sensors, started and stopped in order"},
	{"runtime/cmd", 7, "the CLI: a thin front over the device and the offline tools"},
	{"examples", 8, "programs built on everything"},
}

func layer(path string) int {
	rel := strings.TrimPrefix(path, module+"/")
	best, l := -1, 0
	for _, x := range layers {
		if strings.HasPrefix(rel, x.prefix) && len(x.prefix) > best {
			best, l = len(x.prefix), x.layer
		}
	}
	return l
}

func TestDeps(t *testing.T) {
	pkgs := listPackages(t)
	if len(pkgs) == 0 {
		t.Fatal("go list returned no packages")
	}
	for _, p := range pkgs {
		for _, imp := range p.Imports {
			for _, r := range importRules {
				if strings.HasPrefix(imp, r.dep) && !contains(r.allowed, p.ImportPath) {
					t.Errorf("%s imports %s; only %v may", p.ImportPath, imp, r.allowed)
				}
			}
			// Test-support packages (named *test, like net/http/httptest)
			// may import testing; production packages may import neither.
			if (imp == "testing" || strings.HasPrefix(imp, "testing/")) && !testSupport(p.ImportPath) {
				t.Errorf("production package %s imports %s", p.ImportPath, imp)
			}
			if strings.HasPrefix(imp, module+"/") && testSupport(imp) && !testSupport(p.ImportPath) && !simulation(p.ImportPath, imp) {
				t.Errorf("production package %s imports the test-support package %s", p.ImportPath, imp)
			}
			if strings.HasPrefix(imp, module+"/") && layer(imp) > layer(p.ImportPath) {
				t.Errorf("%s (layer %d) imports %s (layer %d): imports must point down",
					p.ImportPath, layer(p.ImportPath), imp, layer(imp))
			}
		}
	}
}

// simulation allows the fleet demo its simulated devices: the demo is a
// run of fleettest's fleet, and fleettest imports no "testing" (the check
// above keeps it that way).
func simulation(path, imp string) bool {
	return path == module+"/examples/fleet" && imp == module+"/runtime/device/fleettest"
}

// testSupport reports whether a package is test support (its name ends in
// "test"), imported only by tests.
func testSupport(path string) bool {
	return strings.HasSuffix(path[strings.LastIndex(path, "/")+1:], "test") && strings.HasPrefix(path, module+"/")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
