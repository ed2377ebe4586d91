/*
 * nnbuild check firmware of a Gravity program: the learning loop of a device, case by case.
 *
 * Build with -DNN_HEADER=\"model.h\" -DNN_INITIALIZE=.. -DNN_ACTIVATE=.. -DNN_TRAIN=.. -DNN_REAL=..
 * -DNN_FRAC=.. -DNN_FIXED=0|1 -DNN_IN=.. -DNN_OUT=.. -DNN_BATCH=.. (the header's macros, see
 * nnbuild.kinds.gravity.check_defines).
 *
 * The blob is initialised once (seed 1). Each case is one batch, NN_BATCH inputs then NN_BATCH
 * targets (float32); the program writes the outputs of activate on the batch's first input, then
 * trains on the batch. So a case's outputs depend on every earlier case: they check activate and
 * train together against the float64 reference of the same learning sequence.
 *
 * -DNN_FRESH_BLOB=1 starts every case from the initial blob instead (timing searches: a case
 * with NaN or infinite values then decides nothing about the next ones).
 *
 * Host: little-endian float32 records on stdin/stdout (check_io.h). AVR: nnbuild_in/nnbuild_out
 * with the nnbuild_ready hook, as check_main.c (simavr_run.c moves the floats).
 */
#include NN_HEADER

#include "check_io.h"

#define NN_CASE_IN (NN_BATCH * (NN_IN + NN_OUT))

static NN_REAL blob[(NN_MEMORY + sizeof(NN_REAL) - 1) / sizeof(NN_REAL)];
static NN_REAL xs[NN_BATCH * NN_IN];
static NN_REAL ys[NN_BATCH * NN_OUT];

/* float -> the program's number (fixed: round half up in float, saturate) */
static NN_REAL to_number(float r)
{
#if NN_FIXED
    const float limit = (float)((1UL << (sizeof(NN_REAL) * 8 - 2)) - 1) * 2.0f;
    float scaled = r * (float)(1UL << NN_FRAC) + 0.5f;
    long q;
    if (!(scaled == scaled)) return 0;
    if (scaled >= limit) scaled = limit;
    if (scaled <= -limit) scaled = -limit;
    q = (long)scaled;
    if ((float)q > scaled) q -= 1;
    return (NN_REAL)q;
#else
    return (NN_REAL)r;
#endif
}

static float to_float(NN_REAL v)
{
#if NN_FIXED
    return (float)v / (float)(1UL << NN_FRAC);
#else
    return (float)v;
#endif
}

/* one case: activate on the first input of the batch (written to out), then one training step */
static void learn(const float *in, float *out)
{
    const NN_REAL *a;
    int i;
#if defined(NN_FRESH_BLOB) && NN_FRESH_BLOB
    NN_INITIALIZE(blob, 1u);
#endif
    for (i = 0; i < NN_BATCH * NN_IN; ++i)
        xs[i] = to_number(in[i]);
    for (i = 0; i < NN_BATCH * NN_OUT; ++i)
        ys[i] = to_number(in[NN_BATCH * NN_IN + i]);
    a = (const NN_REAL *)NN_ACTIVATE(blob, xs);
    for (i = 0; i < NN_OUT; ++i)
        out[i] = to_float(a[i]);
    NN_TRAIN(blob, xs, ys);
}

#ifndef __AVR__

static void nnbuild_step(const unsigned char *inbuf, unsigned char *outbuf)
{
    static float in[NN_CASE_IN];
    static float out[NN_OUT];

    nnbuild_get_f32s(in, inbuf, NN_CASE_IN);
    learn(in, out);
    nnbuild_put_f32s(outbuf, out, NN_OUT);
}

int main(void)
{
    static unsigned char inbuf[4 * NN_CASE_IN];
    static unsigned char outbuf[4 * NN_OUT];

    NN_INITIALIZE(blob, 1u);
    return nnbuild_serve("gravity_check_main", "batch", inbuf, sizeof inbuf, outbuf, sizeof outbuf,
                         nnbuild_step);
}

#else /* __AVR__ */

float nnbuild_in[NN_CASE_IN];
float nnbuild_out[NN_OUT];

int main(void)
{
    NN_INITIALIZE(blob, 1u);
    for (;;) {
        nnbuild_ready();
        learn(nnbuild_in, nnbuild_out);
    }
}

#endif
