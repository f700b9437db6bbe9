package ort

import (
	"fmt"
	"sync"

	onnx "github.com/yalue/onnxruntime_go"
)

// The process has one ONNX Runtime environment (ONNX Runtime itself keeps a
// singleton). It is created by the first Acquire, shared by every session,
// and destroyed, unloading the library, when the last holder releases it.
var env struct {
	mu      sync.Mutex
	refs    int
	path    string
	version string
	opsErr  error // why edgeinfer's custom operators are not registered; nil when they are
}

// Acquire loads the ONNX Runtime library (see FindLibrary for how
// libraryPath, $ONNXRUNTIME_LIB and the default locations are used) and
// initialises the process-wide environment, or takes another reference to
// it. Every successful Acquire must be matched by one Release. Sessions
// acquire and release the environment themselves; call Acquire directly to
// keep the library loaded across sessions or to query Version.
//
// Once loaded, the library stays the one in use until the last Release: an
// Acquire naming a different path while it is loaded is an error.
// Safe for concurrent use.
func Acquire(libraryPath string) error {
	env.mu.Lock()
	defer env.mu.Unlock()
	if env.refs > 0 {
		if libraryPath != "" && libraryPath != env.path {
			return fmt.Errorf("%w: %s already loaded, cannot also load %s", ErrLibraryLoad, env.path, libraryPath)
		}
		env.refs++
		return nil
	}
	path, err := FindLibrary(libraryPath)
	if err != nil {
		return err
	}
	onnx.SetSharedLibraryPath(path)
	// Fatal only: ONNX Runtime logs every failed provider append at error
	// level, and those failures are reported here as skip reasons instead.
	if err := onnx.InitializeEnvironment(onnx.WithLogLevelFatal()); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrLibraryLoad, path, err)
	}
	env.refs = 1
	env.path = path
	env.version = onnx.GetVersion()
	env.opsErr = initCustomOps(path)
	return nil
}

// Release drops one reference taken by Acquire; the last one destroys the
// environment and unloads the library. Safe for concurrent use.
func Release() error {
	env.mu.Lock()
	defer env.mu.Unlock()
	if env.refs == 0 {
		return ErrNotAcquired
	}
	env.refs--
	if env.refs > 0 {
		return nil
	}
	env.path, env.version = "", ""
	releaseCustomOps()
	releasePlugins()
	if err := onnx.DestroyEnvironment(); err != nil {
		return fmt.Errorf("ort: release environment: %w", err)
	}
	return nil
}

// Version returns the version string of the loaded ONNX Runtime library
// ("1.30.0"), or "" when no environment is held.
func Version() string {
	env.mu.Lock()
	defer env.mu.Unlock()
	return env.version
}

// LibraryPath returns the path of the loaded library, or "" when none is.
func LibraryPath() string {
	env.mu.Lock()
	defer env.mu.Unlock()
	return env.path
}
