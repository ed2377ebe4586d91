/*
 * check_io.h: the I/O half of nnbuild's check firmware, one copy for check_main.c,
 * int8_check_main.c, tpg_check_main.c, gravity_check_main.c and tests/wcet_fixtures/avr_main.c (each included by exactly one file of a
 * program, so the definitions below live here).
 *
 * Host (not __AVR__): nnbuild_serve() runs the stdin/stdout record loop: fixed-size records in
 * until EOF, one fixed-size answer out per record, exit status 0 on success, 2 on a truncated
 * record, 3 on an I/O error; plus little-endian codecs, so the byte order on the wire is
 * little-endian on any host.
 *
 * AVR: the ready hook of the symbol contract of nnbuild/runners/simavr_run.c (and simavr.py):
 *   nnbuild_in[]    the harness writes the next input here ...
 *   nnbuild_out[]   ... and reads the previous outputs here
 *   void nnbuild_ready(void);   ... whenever the PC reaches this hook.
 * The includer defines the two arrays (their element types differ) and main(), which loops
 * forever: nnbuild_ready(); then one inference from nnbuild_in to nnbuild_out. The harness stops
 * the simulation.
 */
#ifndef NNBUILD_CHECK_IO_H
#define NNBUILD_CHECK_IO_H

#ifndef __AVR__

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static inline uint32_t nnbuild_get_u32(const unsigned char *b)
{
    return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
}

static inline void nnbuild_put_u32(unsigned char *b, uint32_t w)
{
    b[0] = (unsigned char)(w & 0xffu);
    b[1] = (unsigned char)((w >> 8) & 0xffu);
    b[2] = (unsigned char)((w >> 16) & 0xffu);
    b[3] = (unsigned char)((w >> 24) & 0xffu);
}

static inline float nnbuild_get_f32(const unsigned char *b)
{
    uint32_t w = nnbuild_get_u32(b);
    float f;
    memcpy(&f, &w, sizeof f);
    return f;
}

static inline void nnbuild_put_f32(unsigned char *b, float f)
{
    uint32_t w;
    memcpy(&w, &f, sizeof w);
    nnbuild_put_u32(b, w);
}

/* A record's n float32 values into v, and v's n values into a record. */
static inline void nnbuild_get_f32s(float *v, const unsigned char *b, size_t n)
{
    size_t i;

    for (i = 0; i < n; ++i)
        v[i] = nnbuild_get_f32(b + 4 * i);
}

static inline void nnbuild_put_f32s(unsigned char *b, const float *v, size_t n)
{
    size_t i;

    for (i = 0; i < n; ++i)
        nnbuild_put_f32(b + 4 * i, v[i]);
}

static inline double nnbuild_get_f64(const unsigned char *b)
{
    uint64_t w = ((uint64_t)nnbuild_get_u32(b + 4) << 32) | nnbuild_get_u32(b);
    double d;
    memcpy(&d, &w, sizeof d);
    return d;
}

/* The stack probe of a Cortex-M check program: nnbuild's reset code for qemu-system-arm
 * (runners/cortexm/startup.c) defines nnbuild_stack_paint and nnbuild_stack_peak; elsewhere the weak
 * references stay null and the probe does nothing. NNBUILD_STACK_PAINT() before the inference and
 * NNBUILD_STACK_REPORT() after it, in the same function (one SP for both calls and the inference's),
 * write `nnbuild-stack=BYTES` on stderr: the high-water mark below the SP at the call. */
#if defined(__ARM_ARCH_PROFILE) && __ARM_ARCH_PROFILE == 'M'
void nnbuild_stack_paint(void) __attribute__((weak));
unsigned long nnbuild_stack_peak(void) __attribute__((weak));
#define NNBUILD_STACK_PAINT() \
    do { if (nnbuild_stack_paint) nnbuild_stack_paint(); } while (0)
#define NNBUILD_STACK_REPORT() \
    do { if (nnbuild_stack_peak) fprintf(stderr, "nnbuild-stack=%lu\n", nnbuild_stack_peak()); } while (0)
#else
#define NNBUILD_STACK_PAINT() do { } while (0)
#define NNBUILD_STACK_REPORT() do { } while (0)
#endif

/* One record at a time: read `in_bytes` into `inbuf` (EOF before a record ends the loop), let
 * `step` fill `outbuf` with `out_bytes`, write them. `who` and `record` name the program and the
 * record in error messages. Returns main's exit status. */
static int nnbuild_serve(const char *who, const char *record, unsigned char *inbuf, size_t in_bytes,
                         unsigned char *outbuf, size_t out_bytes,
                         void (*step)(const unsigned char *in, unsigned char *out))
{
    for (;;) {
        size_t got = fread(inbuf, 1, in_bytes, stdin);
        if (got == 0 && feof(stdin))
            break;
        if (got != in_bytes) {
            fprintf(stderr, "%s: truncated %s (%lu of %lu bytes)\n", who, record,
                    (unsigned long)got, (unsigned long)in_bytes);
            return ferror(stdin) ? 3 : 2;
        }
        step(inbuf, outbuf);
        if (fwrite(outbuf, 1, out_bytes, stdout) != out_bytes) {
            fprintf(stderr, "%s: write error\n", who);
            return 3;
        }
    }
    if (fflush(stdout) != 0) {
        fprintf(stderr, "%s: write error\n", who);
        return 3;
    }
    return 0;
}

/* main() of a model's check program (check_main.c, int8_check_main.c): records of NN_IN float32
 * values in, NN_OUT out, each through `step` (the includer's conversion around one inference). */
#define NNBUILD_SERVE_VECTORS(who, step)                                                          \
    int main(void)                                                                                \
    {                                                                                             \
        static unsigned char inbuf[4 * NN_IN];                                                    \
        static unsigned char outbuf[4 * NN_OUT];                                                  \
        return nnbuild_serve(who, "input vector", inbuf, sizeof inbuf, outbuf, sizeof outbuf, step); \
    }

#else /* __AVR__ */

void nnbuild_ready(void) __attribute__((noinline, noclone, used));

/* The harness writes nnbuild_in while the PC sits here; the memory clobber
 * stops gcc from treating the hook as pure and caching the inputs across it. */
void nnbuild_ready(void)
{
    __asm__ __volatile__("" ::: "memory");
}

#endif /* __AVR__ */

/* A model's check program calls NN_CALL(in, out) on the flat vectors of every input's values one
 * after the other (every output's, likewise): a model of several inputs or outputs (NN_INPUT_COUNT,
 * its header's MODEL_INPUT_COUNT, is a number there) takes NN_ARGS(in, out), its header's
 * MODEL_INFER_ARGS, one argument each; a one-input one-output model leaves MODEL_INPUT_COUNT
 * undefined (0 in #if) and takes in and out. */
#if defined(NN_INFER)
#if NN_INPUT_COUNT + 0 > 0
#define NN_CALL(in, out) NN_INFER(NN_ARGS(in, out))
#else
#define NN_CALL(in, out) NN_INFER(in, out)
#endif
#endif

#endif /* NNBUILD_CHECK_IO_H */
