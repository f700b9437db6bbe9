// Package archtest holds the module-wide dependency rules, as tests. It
// lives here, not at the module root, because the root holds no Go files,
// and it has no code of its own: the rules and their reasons are the
// tables in its tests.
//
// Imports point down only. The folders are floors, bottom to top (the
// layers table in deps_test.go, each floor with its reason): the leaves
// under pkg/ (formats, the store, metrics, sensors, the MQTT link) <
// quant < runtime/* (ONNX Runtime, tokenizer, plugins, scheduler, KV
// cache) < runtime/engine < update/* and platforms < runtime/serve and
// runtime/loadgen < runtime/device < runtime/cmd < examples. A package's
// floor is the longest folder prefix it matches, with no exceptions by
// name.
//
// Each heavy or native dependency has one owner, so its limits cannot be
// bypassed and an application that does not need it does not carry it:
// only runtime/ort imports onnxruntime_go (the one cgo boundary), only
// pkg/store imports bbolt, only pkg/link imports paho (one MQTT connection
// per device, shared by telemetry, commands and updates), only
// runtime/plugin imports wazero, and only update and update/fleet import
// go-tuf. The engine links no protobuf runtime, graph builder,
// quantisation, load generator, TUF or MQTT; the fleet side and the
// device's rollout loop link no engine (they build without cgo). No
// production package imports testing or a test-support package (a name
// ending in "test"); the shared leaves (sharedLeaves in leaves_test.go:
// the one copy of each codec) import nothing of the module.
package archtest
