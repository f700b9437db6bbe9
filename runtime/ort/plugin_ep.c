// Plug-in execution providers: an ONNX Runtime core built without CUDA can
// still run the CUDA provider when the provider library exports
// CreateEpFactories (the Unity packages' 1.29 build does): it is registered
// with the environment, and the session gets it through the OrtEpDevice it
// creates. onnxruntime_go has no binding for GetEpDevices or
// SessionOptionsAppendExecutionProvider_V2, so they are called here.
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "include/onnxruntime_c_api.h"
#include "plugin_ep.h"

// RegisterExecutionProviderLibrary, GetEpDevices and
// SessionOptionsAppendExecutionProvider_V2 arrived in C API 22 (1.22).
#define EI_EP_API_VERSION 22
#define EI_MAX_EPS 8

static const OrtApi* eapi;
static OrtEnv* eenv;  // ONNX Runtime's process-wide environment: CreateEnv returns it with one more reference
static char registered[EI_MAX_EPS][64];
static int nregistered;

static int fail(OrtStatus* st, char* err, size_t errlen) {
  snprintf(err, errlen, "%s", eapi->GetErrorMessage(st));
  eapi->ReleaseStatus(st);
  return -1;
}

int edgeinfer_ep_register(const char* core, const char* name, const char* lib, char* err, size_t errlen) {
  for (int i = 0; i < nregistered; i++)
    if (strcmp(registered[i], name) == 0) return 0;
  if (nregistered == EI_MAX_EPS || strlen(name) >= sizeof registered[0]) {
    snprintf(err, errlen, "too many plug-in providers");
    return -1;
  }
  if (eapi == NULL) {
    void* h = dlopen(core, RTLD_NOW | RTLD_NOLOAD);
    if (h == NULL) {
      snprintf(err, errlen, "%s is not loaded: %s", core, dlerror());
      return -1;
    }
    const OrtApiBase* (*base)(void) = (const OrtApiBase* (*)(void))dlsym(h, "OrtGetApiBase");
    eapi = base == NULL ? NULL : base()->GetApi(EI_EP_API_VERSION);
    dlclose(h);  // the library stays loaded: onnxruntime_go holds it
    if (eapi == NULL) {
      snprintf(err, errlen, "plug-in providers need ONNX Runtime 1.22 or later (C API %d)", EI_EP_API_VERSION);
      return -1;
    }
  }
  OrtStatus* st;
  if (eenv == NULL && (st = eapi->CreateEnv(ORT_LOGGING_LEVEL_FATAL, "edgeinfer", &eenv)) != NULL) {
    eenv = NULL;
    return fail(st, err, errlen);
  }
  if ((st = eapi->RegisterExecutionProviderLibrary(eenv, name, lib)) != NULL) return fail(st, err, errlen);
  snprintf(registered[nregistered++], sizeof registered[0], "%s", name);
  return 0;
}

int edgeinfer_ep_append(void* so, const char* ep_name, const char** keys, const char** vals, size_t n, char* err,
                        size_t errlen) {
  if (eenv == NULL) {
    snprintf(err, errlen, "no plug-in provider registered");
    return -1;
  }
  const OrtEpDevice* const* devs;
  size_t ndevs;
  OrtStatus* st = eapi->GetEpDevices(eenv, &devs, &ndevs);
  if (st != NULL) return fail(st, err, errlen);
  const OrtEpDevice* picked[16];
  size_t npicked = 0;
  char seen[256] = "";
  for (size_t i = 0; i < ndevs; i++) {
    const char* name = eapi->EpDevice_EpName(devs[i]);
    if (name != NULL && strcmp(name, ep_name) == 0 && npicked < 16) picked[npicked++] = devs[i];
    if (name != NULL && strlen(seen) + strlen(name) + 3 < sizeof seen) {
      if (seen[0]) strcat(seen, ", ");
      strcat(seen, name);
    }
  }
  if (npicked == 0) {
    snprintf(err, errlen, "no device for %s (devices: %s)", ep_name, seen[0] ? seen : "none");
    return -1;
  }
  st = eapi->SessionOptionsAppendExecutionProvider_V2((OrtSessionOptions*)so, eenv, picked, npicked, keys, vals, n);
  return st == NULL ? 0 : fail(st, err, errlen);
}

// edgeinfer_ep_release runs before the environment is destroyed: the
// library may be unloaded after it, so its API table is forgotten too.
void edgeinfer_ep_release(void) {
  if (eenv != NULL) {
    for (int i = 0; i < nregistered; i++) {
      OrtStatus* st = eapi->UnregisterExecutionProviderLibrary(eenv, registered[i]);
      if (st != NULL) eapi->ReleaseStatus(st);
    }
    eapi->ReleaseEnv(eenv);
    eenv = NULL;
  }
  nregistered = 0;
  eapi = NULL;
}
