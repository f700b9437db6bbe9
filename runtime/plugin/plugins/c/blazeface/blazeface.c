/*
 * blazeface (C): BlazeFace's anchors decoded into candidate faces, merged by
 * the host's weighted NMS; the same as the Go plugin
 * runtime/plugin/plugins/blazeface and prepost.DecodeBlazeFace, for
 * BenchmarkBlazeFaceDecode to compare a C guest with a Go one. Inputs: the
 * model's four outputs (or candidates float32 [N,5]); arguments threshold
 * (0.75) and iou (0.3, for candidates). Output: faces float32 [M,5].
 */
#include <math.h>
#include <stdlib.h>

#include "edgeinfer_plugin.h"

static const char *names[4] = {"Identity:0", "Identity_1:0", "Identity_2:0", "Identity_3:0"};

/* anchors: prepost.BlazeFaceAnchors, computed once per instance. */
static double anchors[896][2];
static int have_anchors;

static void make_anchors(void) {
    int i = 0;
    const int layers[2][2] = {{16, 2}, {8, 6}};
    for (int l = 0; l < 2; l++)
        for (int y = 0; y < layers[l][0]; y++)
            for (int x = 0; x < layers[l][0]; x++)
                for (int k = 0; k < layers[l][1]; k++) {
                    anchors[i][0] = (x + 0.5) / layers[l][0];
                    anchors[i][1] = (y + 0.5) / layers[l][0];
                    i++;
                }
    have_anchors = 1;
}

static double number(const ei_tensor *in, int n, const char *key, double def, int *bad) {
    const char *s = ei_arg(in, n, key, NULL);
    if (!s || !*s) return def;
    char *end;
    double v = strtod(s, &end);
    if (*end) *bad = 1;
    return v;
}

int ei_plugin_run(const ei_tensor *in, int n) {
    int bad = 0;
    double iou = number(in, n, "iou", 0.3, &bad);
    if (bad) return ei_error("argument iou: want a number");
    ei_tensor req[2];
    const ei_tensor *cands = ei_find(in, n, "candidates");
    if (cands) {
        req[0] = *cands;
    } else {
        double thr = number(in, n, "threshold", 0.75, &bad);
        if (bad) return ei_error("argument threshold: want a number");
        const float *part[4];
        int64_t len[4];
        for (int i = 0; i < 4; i++) {
            const ei_tensor *t = ei_find(in, n, names[i]);
            if (!t || t->dtype != EI_F32) return ei_error("no input %s (float32)", names[i]);
            part[i] = t->data;
            len[i] = ei_elements(t);
        }
        if (len[0] + len[1] != 896 || len[2] + len[3] != 896 * 16)
            return ei_error("%lld scores and %lld box values, want 896 and 896x16", (long long)(len[0] + len[1]), (long long)(len[2] + len[3]));
        if (!have_anchors) make_anchors();
        float *flat = ei_scratch(896 * 5 * sizeof(float));
        if (!flat) return ei_error("out of memory");
        int64_t m = 0;
        /* As prepost.BlazeFaceCandidates: a logit below the threshold's is
         * skipped before its exponential. */
        double min_logit = thr > 0 && thr < 1 ? log(thr / (1 - thr)) - 1e-9 : -INFINITY;
        for (int i = 0; i < 896; i++) {
            double logit = i < len[0] ? part[0][i] : part[1][i - len[0]];
            if (logit < min_logit) continue;
            const float *r = i < len[0] ? part[2] + 16 * i : part[3] + 16 * (i - len[0]);
            double s = 1 / (1 + exp(-fmax(-100, fmin(100, logit))));
            if (s < thr) continue;
            /* In float64 as prepost does, then stored as float32 as the Go
             * plugin sends them to the host. */
            double ax = anchors[i][0], ay = anchors[i][1];
            double cx = r[0] / 128.0 + ax, cy = r[1] / 128.0 + ay;
            double w = r[2] / 128.0, h = r[3] / 128.0;
            float *o = flat + 5 * m++;
            o[0] = (float)s, o[1] = (float)(cx - w / 2), o[2] = (float)(cy - h / 2);
            o[3] = (float)(cx + w / 2), o[4] = (float)(cy + h / 2);
        }
        req[0] = (ei_tensor){.name = "candidates", .name_len = 10, .dtype = EI_F32, .rank = 2, .dims = {m, 5}, .data = flat, .size = (uint64_t)m * 20};
        iou = 0.3; /* MediaPipe's merge */
    }
    req[1] = (ei_tensor){.name = "iou", .name_len = 3, .dtype = EI_F64, .rank = 0, .data = &iou, .size = 8};
    ei_tensor out[4];
    int k = ei_host("nms.weighted", req, 2, out, 4);
    if (k < 0) return -1;
    const ei_tensor *faces = ei_find(out, k, "faces");
    if (!faces) return ei_error("nms.weighted returned no faces");
    return ei_output("faces", EI_F32, faces->rank, faces->dims, faces->data, faces->size);
}
