package ort

/*
#include <stdlib.h>
#include "plugin_ep.h"
*/
import "C"

import (
	"debug/elf"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"unsafe"

	onnx "github.com/yalue/onnxruntime_go"
)

// pluginEPs are the providers that can also come as plug-in libraries, with
// the execution-provider name their OrtEpDevices carry.
var pluginEPs = map[Provider]string{CUDA: "CUDAExecutionProvider"}

var pluginMu sync.Mutex // serialises registration; the C side keeps the list

// pluginLibrary returns the plug-in library for p beside the loaded core, ""
// when there is none or it is not a plug-in (no CreateEpFactories export:
// a provider-bridge library that only a core built with p can use).
func pluginLibrary(p Provider) string {
	if _, ok := pluginEPs[p]; !ok {
		return ""
	}
	core := LibraryPath()
	if core == "" {
		return ""
	}
	lib := filepath.Join(filepath.Dir(core), providerLibraries[p])
	f, err := elf.Open(lib)
	if err != nil {
		return ""
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil || !slices.ContainsFunc(syms, func(s elf.Symbol) bool { return s.Name == "CreateEpFactories" }) {
		return ""
	}
	return lib
}

// appendPlugin registers p's plug-in library (once per environment) and
// appends it to so for every device it offers.
func appendPlugin(so *onnx.SessionOptions, p ProviderConfig, lib string) error {
	if !optionsLayoutOK() {
		return fmt.Errorf("%w: onnxruntime_go's SessionOptions is no longer one C pointer", ErrInvalidOptions)
	}
	var msg [1024]C.char
	pluginMu.Lock()
	ccore, cname, clib := C.CString(LibraryPath()), C.CString(string(p.Name)), C.CString(lib)
	rc := C.edgeinfer_ep_register(ccore, cname, clib, &msg[0], C.size_t(len(msg)))
	C.free(unsafe.Pointer(ccore))
	C.free(unsafe.Pointer(cname))
	C.free(unsafe.Pointer(clib))
	pluginMu.Unlock()
	if rc != 0 {
		return fmt.Errorf("plug-in %s: %s", lib, C.GoString(&msg[0]))
	}
	keys := make([]string, 0, len(p.Options))
	for k := range p.Options {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	ck := C.malloc(C.size_t(max(len(keys), 1)) * C.size_t(unsafe.Sizeof(uintptr(0))))
	cv := C.malloc(C.size_t(max(len(keys), 1)) * C.size_t(unsafe.Sizeof(uintptr(0))))
	defer C.free(ck)
	defer C.free(cv)
	kp := unsafe.Slice((**C.char)(ck), max(len(keys), 1))
	vp := unsafe.Slice((**C.char)(cv), max(len(keys), 1))
	for i, k := range keys {
		kp[i], vp[i] = C.CString(k), C.CString(p.Options[k])
		defer C.free(unsafe.Pointer(kp[i]))
		defer C.free(unsafe.Pointer(vp[i]))
	}
	ptr := *(*unsafe.Pointer)(unsafe.Pointer(so))
	cep := C.CString(pluginEPs[p.Name])
	defer C.free(unsafe.Pointer(cep))
	if C.edgeinfer_ep_append(ptr, cep, (**C.char)(ck), (**C.char)(cv), C.size_t(len(keys)), &msg[0], C.size_t(len(msg))) != 0 {
		return fmt.Errorf("plug-in %s: %s", filepath.Base(lib), C.GoString(&msg[0]))
	}
	return nil
}

// releasePlugins unregisters the plug-in libraries and drops the reference
// to the environment they hold; called before the environment is destroyed.
func releasePlugins() {
	pluginMu.Lock()
	defer pluginMu.Unlock()
	C.edgeinfer_ep_release()
}

// notInBuild reports an append error that means the core lacks the provider.
func notInBuild(err error) bool {
	return err != nil && strings.Contains(strings.ToLower(err.Error()), "not enabled in this build")
}
