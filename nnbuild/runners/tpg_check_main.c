/*
 * nnbuild check firmware for Tangled Program Graphs: one generic main around a generated
 * `int <model>_infer(const double <source>[n], ...)` (shapes switch and stack).
 *
 * Build with:
 *   -DNN_HEADER=\"model.h\" -DNN_INFER_FLAT=MODEL_INFER_FLAT -DNN_IN=<doubles per observation>
 * (MODEL_INFER_FLAT, from the generated header, calls the entry point on one flat array.)
 *
 * Host (not __AVR__): reads observations of NN_IN little-endian IEEE binary64 values from stdin
 * until EOF, and writes each action id as a little-endian int32 to stdout.
 * Exit status: 0 on success, 2 on a truncated observation, 3 on an I/O error.
 *
 * AVR (avr-gcc's double is 32 bits): symbol contract of nnbuild/runners/simavr_run.c (check_io.h):
 *   double nnbuild_in[NN_IN];   the harness writes the next observation here (float32 values) ...
 *   float nnbuild_out[1];       ... and reads the previous action id here (as a float: exact)
 *   void nnbuild_ready(void);   ... whenever the PC reaches this hook.
 */
#include NN_HEADER

#if !defined(NN_INFER_FLAT) || !defined(NN_IN)
#error "define NN_HEADER, NN_INFER_FLAT and NN_IN"
#endif

#include "check_io.h"

#ifndef __AVR__

/* One observation: NN_IN binary64 in, the action id as an int32 out. */
static void nnbuild_step(const unsigned char *inbuf, unsigned char *outbuf)
{
    static double obs[NN_IN];
    int i;

    for (i = 0; i < NN_IN; ++i)
        obs[i] = nnbuild_get_f64(inbuf + 8 * i);
    nnbuild_put_u32(outbuf, (uint32_t)(int32_t)NN_INFER_FLAT(obs));
}

int main(void)
{
    static unsigned char inbuf[8 * NN_IN];
    static unsigned char outbuf[4];

    return nnbuild_serve("tpg_check_main", "observation", inbuf, sizeof inbuf, outbuf, sizeof outbuf,
                         nnbuild_step);
}

#else /* __AVR__ */

double nnbuild_in[NN_IN];
float nnbuild_out[1];

int main(void)
{
    for (;;) {
        nnbuild_ready();
        nnbuild_out[0] = (float)NN_INFER_FLAT(nnbuild_in);
    }
}

#endif
