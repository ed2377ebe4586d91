/*
 * nnbuild check firmware of an int8 (full-integer) model: check_main.c's protocol around an
 * inference function that takes and returns int8_t.
 *
 * Build with:
 *   -DNN_HEADER=\"model.h\" -DNN_INFER=model_infer -DNN_IN=<inputs> -DNN_OUT=<outputs>
 * and, for a model of several inputs or outputs, -DNN_INPUT_COUNT=MODEL_INPUT_COUNT
 * -DNN_ARGS=MODEL_INFER_ARGS, as check_main.c (the vectors hold every argument's values in turn).
 *
 * The wire stays float32 (every int8 value is exact in it): host, qemu and simavr runners move
 * float32 vectors as for any model; this main converts them to int8 before the call and back after.
 *
 * Host (not __AVR__): reads little-endian float32 vectors of NN_IN values from stdin until EOF,
 * writes NN_OUT little-endian float32 values per vector to stdout. Exit status: 0 on success,
 * 2 on a truncated input vector, 3 on an I/O error.
 *
 * AVR: the symbol contract of nnbuild/runners/simavr_run.c (check_io.h):
 *   float nnbuild_in[NN_IN];    the harness writes the next input here ...
 *   float nnbuild_out[NN_OUT];  ... and reads the previous outputs here
 *   void nnbuild_ready(void);   ... whenever the PC reaches this hook.
 * Only NN_INFER is measured and bounded: the conversions lie outside it.
 */
#include <stdint.h>

#include NN_HEADER

#if !defined(NN_INFER) || !defined(NN_IN) || !defined(NN_OUT)
#error "define NN_HEADER, NN_INFER, NN_IN and NN_OUT"
#endif

#include "check_io.h"   /* the record loop, NN_CALL and NNBUILD_SERVE_VECTORS */

static int8_t nnbuild_q_in[NN_IN];
static int8_t nnbuild_q_out[NN_OUT];

/* The harness sends int8 values: a float outside [-128, 127] is clamped (never wraps). */
static int8_t nnbuild_to_int8(float v)
{
    return (int8_t)(v < -128.0f ? -128 : (v > 127.0f ? 127 : (int)v));
}

#ifndef __AVR__

static void nnbuild_step(const unsigned char *inbuf, unsigned char *outbuf)
{
    int i;

    for (i = 0; i < NN_IN; ++i)
        nnbuild_q_in[i] = nnbuild_to_int8(nnbuild_get_f32(inbuf + 4 * i));
    NN_CALL(nnbuild_q_in, nnbuild_q_out);
    for (i = 0; i < NN_OUT; ++i)
        nnbuild_put_f32(outbuf + 4 * i, (float)nnbuild_q_out[i]);
}

NNBUILD_SERVE_VECTORS("int8_check_main", nnbuild_step)

#else /* __AVR__ */

float nnbuild_in[NN_IN];
float nnbuild_out[NN_OUT];

int main(void)
{
    for (;;) {
        uint16_t i;

        nnbuild_ready();
        for (i = 0; i < NN_IN; ++i)
            nnbuild_q_in[i] = nnbuild_to_int8(nnbuild_in[i]);
        NN_CALL(nnbuild_q_in, nnbuild_q_out);
        for (i = 0; i < NN_OUT; ++i)
            nnbuild_out[i] = (float)nnbuild_q_out[i];
    }
}

#endif
