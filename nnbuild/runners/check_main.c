/*
 * nnbuild check firmware: one generic main around a generated inference function.
 *
 * Build with:
 *   -DNN_HEADER=\"model.h\" -DNN_INFER=model_infer -DNN_IN=<inputs> -DNN_OUT=<outputs>
 * and, for a model of several inputs or outputs (its header defines MODEL_INPUT_COUNT and
 * MODEL_INFER_ARGS), -DNN_INPUT_COUNT=MODEL_INPUT_COUNT -DNN_ARGS=MODEL_INFER_ARGS: the vectors
 * then hold every input's values one after the other (every output's, likewise), in the model's
 * order, and NN_ARGS splits them into the function's arguments. For a one-input one-output model
 * MODEL_INPUT_COUNT is not defined, so NN_INPUT_COUNT is 0 in #if and the call takes in and out.
 *
 * Host (not __AVR__): reads little-endian float32 vectors of NN_IN values from stdin
 * until EOF, and writes NN_OUT little-endian float32 values per vector to stdout.
 * Exit status: 0 on success, 2 on a truncated input vector, 3 on an I/O error.
 *
 * AVR: symbol contract used by nnbuild/runners/simavr_run.c (check_io.h):
 *   float nnbuild_in[NN_IN];    the harness writes the next input here ...
 *   float nnbuild_out[NN_OUT];  ... and reads the previous outputs here
 *   void nnbuild_ready(void);   ... whenever the PC reaches this hook.
 * main() loops forever: nnbuild_ready(); NN_CALL(nnbuild_in, nnbuild_out);
 * The harness stops the simulation.
 */
#include NN_HEADER

#if !defined(NN_INFER) || !defined(NN_IN) || !defined(NN_OUT)
#error "define NN_HEADER, NN_INFER, NN_IN and NN_OUT"
#endif

#include "check_io.h"   /* the record loop, NN_CALL and NNBUILD_SERVE_VECTORS */

#ifndef __AVR__

/* One vector: NN_IN float32 in, NN_OUT float32 out. */
static void nnbuild_step(const unsigned char *inbuf, unsigned char *outbuf)
{
    static float in[NN_IN];
    static float out[NN_OUT];

    nnbuild_get_f32s(in, inbuf, NN_IN);
    NNBUILD_STACK_PAINT();
    NN_CALL(in, out);
    NNBUILD_STACK_REPORT();
    nnbuild_put_f32s(outbuf, out, NN_OUT);
}

NNBUILD_SERVE_VECTORS("check_main", nnbuild_step)

#else /* __AVR__ */

float nnbuild_in[NN_IN];
float nnbuild_out[NN_OUT];

int main(void)
{
    for (;;) {
        nnbuild_ready();
        NN_CALL(nnbuild_in, nnbuild_out);
    }
}

#endif
