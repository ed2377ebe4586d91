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
 * AVR (avr-gcc's double is 32 bits): symbol contract of nnbuild/runners/simavr_run.c:
 *   double nnbuild_in[NN_IN];   the harness writes the next observation here (float32 values) ...
 *   float nnbuild_out[1];       ... and reads the previous action id here (as a float: exact)
 *   void nnbuild_ready(void);   ... whenever the PC reaches this hook.
 */
#include NN_HEADER

#if !defined(NN_INFER_FLAT) || !defined(NN_IN)
#error "define NN_HEADER, NN_INFER_FLAT and NN_IN"
#endif

#ifndef __AVR__

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Decode explicitly so the byte order on the wire is little-endian on any host. */
static double nnbuild_get_f64(const unsigned char *b)
{
    uint64_t w = 0;
    double d;
    int k;
    for (k = 7; k >= 0; --k)
        w = (w << 8) | (uint64_t)b[k];
    memcpy(&d, &w, sizeof d);
    return d;
}

int main(void)
{
    static unsigned char inbuf[8 * NN_IN];
    static double obs[NN_IN];
    unsigned char outbuf[4];
    int i;

    for (;;) {
        uint32_t a;
        size_t got = fread(inbuf, 1, sizeof inbuf, stdin);
        if (got == 0 && feof(stdin))
            break;
        if (got != sizeof inbuf) {
            fprintf(stderr, "tpg_check_main: truncated observation (%lu of %lu bytes)\n",
                    (unsigned long)got, (unsigned long)sizeof inbuf);
            return ferror(stdin) ? 3 : 2;
        }
        for (i = 0; i < NN_IN; ++i)
            obs[i] = nnbuild_get_f64(inbuf + 8 * i);
        a = (uint32_t)(int32_t)NN_INFER_FLAT(obs);
        outbuf[0] = (unsigned char)(a & 0xffu);
        outbuf[1] = (unsigned char)((a >> 8) & 0xffu);
        outbuf[2] = (unsigned char)((a >> 16) & 0xffu);
        outbuf[3] = (unsigned char)((a >> 24) & 0xffu);
        if (fwrite(outbuf, 1, sizeof outbuf, stdout) != sizeof outbuf) {
            fprintf(stderr, "tpg_check_main: write error\n");
            return 3;
        }
    }
    if (fflush(stdout) != 0) {
        fprintf(stderr, "tpg_check_main: write error\n");
        return 3;
    }
    return 0;
}

#else /* __AVR__ */

double nnbuild_in[NN_IN];
float nnbuild_out[1];

void nnbuild_ready(void) __attribute__((noinline, noclone, used));

/* The harness writes nnbuild_in while the PC sits here; the memory clobber
 * stops gcc from treating the hook as pure and caching the inputs across it. */
void nnbuild_ready(void)
{
    __asm__ __volatile__("" ::: "memory");
}

int main(void)
{
    for (;;) {
        nnbuild_ready();
        nnbuild_out[0] = (float)NN_INFER_FLAT(nnbuild_in);
    }
}

#endif
