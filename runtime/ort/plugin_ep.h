// Execution providers shipped as plug-in libraries (ONNX Runtime 1.22+):
// registered with the environment, then appended by device.
#ifndef EDGEINFER_PLUGIN_EP_H
#define EDGEINFER_PLUGIN_EP_H
#include <stddef.h>

int edgeinfer_ep_register(const char* core, const char* name, const char* lib, char* err, size_t errlen);
int edgeinfer_ep_append(void* session_options, const char* ep_name, const char** keys, const char** vals, size_t n,
                        char* err, size_t errlen);
void edgeinfer_ep_release(void);
#endif
