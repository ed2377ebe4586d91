/*
 * nnbuild check firmware: one generic main around a generated inference function.
 *
 * Build with:
 *   -DNN_HEADER=\"model.h\" -DNN_INFER=model_infer -DNN_IN=<inputs> -DNN_OUT=<outputs>
 *
 * Host (not __AVR__): reads little-endian float32 vectors of NN_IN values from stdin
 * until EOF, and writes NN_OUT little-endian float32 values per vector to stdout.
 * Exit status: 0 on success, 2 on a truncated input vector, 3 on an I/O error.
 *
 * AVR: symbol contract used by nnbuild/runners/simavr_run.c:
 *   float nnbuild_in[NN_IN];    the harness writes the next input here ...
 *   float nnbuild_out[NN_OUT];  ... and reads the previous outputs here
 *   void nnbuild_ready(void);   ... whenever the PC reaches this hook.
 * main() loops forever: nnbuild_ready(); NN_INFER(nnbuild_in, nnbuild_out);
 * The harness stops the simulation.
 */
#include NN_HEADER

#if !defined(NN_INFER) || !defined(NN_IN) || !defined(NN_OUT)
#error "define NN_HEADER, NN_INFER, NN_IN and NN_OUT"
#endif

#ifndef __AVR__

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Decode explicitly so the byte order on the wire is little-endian on any host. */
static float nnbuild_get_f32(const unsigned char *b)
{
    uint32_t w = (uint32_t)b[0] | ((uint32_t)b[1] << 8) |
                 ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
    float f;
    memcpy(&f, &w, sizeof f);
    return f;
}

static void nnbuild_put_f32(unsigned char *b, float f)
{
    uint32_t w;
    memcpy(&w, &f, sizeof w);
    b[0] = (unsigned char)(w & 0xffu);
    b[1] = (unsigned char)((w >> 8) & 0xffu);
    b[2] = (unsigned char)((w >> 16) & 0xffu);
    b[3] = (unsigned char)((w >> 24) & 0xffu);
}

int main(void)
{
    static unsigned char inbuf[4 * NN_IN];
    static unsigned char outbuf[4 * NN_OUT];
    static float in[NN_IN];
    static float out[NN_OUT];
    int i;

    for (;;) {
        size_t got = fread(inbuf, 1, sizeof inbuf, stdin);
        if (got == 0 && feof(stdin))
            break;
        if (got != sizeof inbuf) {
            fprintf(stderr, "check_main: truncated input vector (%lu of %lu bytes)\n",
                    (unsigned long)got, (unsigned long)sizeof inbuf);
            return ferror(stdin) ? 3 : 2;
        }
        for (i = 0; i < NN_IN; ++i)
            in[i] = nnbuild_get_f32(inbuf + 4 * i);
        NN_INFER(in, out);
        for (i = 0; i < NN_OUT; ++i)
            nnbuild_put_f32(outbuf + 4 * i, out[i]);
        if (fwrite(outbuf, 1, sizeof outbuf, stdout) != sizeof outbuf) {
            fprintf(stderr, "check_main: write error\n");
            return 3;
        }
    }
    if (fflush(stdout) != 0) {
        fprintf(stderr, "check_main: write error\n");
        return 3;
    }
    return 0;
}

#else /* __AVR__ */

float nnbuild_in[NN_IN];
float nnbuild_out[NN_OUT];

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
        NN_INFER(nnbuild_in, nnbuild_out);
    }
}

#endif
