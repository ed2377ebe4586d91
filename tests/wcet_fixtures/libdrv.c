/* Drivers for the avr-libc float routines whose loops avr_libloops.json bounds: each takes two
 * floats from `in` and writes results to `out`. Measured under simavr to verify the table. */
#include <math.h>
#include <stdint.h>

void drv_add(const float *in, float *out)
{
    out[0] = in[0] + in[1];
    out[1] = in[0] - in[1];
}

void drv_mul(const float *in, float *out)
{
    out[0] = in[0] * in[1];
}

void drv_div(const float *in, float *out)
{
    out[0] = in[0] / in[1];
}

void drv_cmp(const float *in, float *out)
{
    out[0] = in[0] > in[1] ? 1.0f : (in[0] < in[1] ? -1.0f : 0.0f);
}

void drv_exp(const float *in, float *out)
{
    out[0] = expf(in[0]);
}

void drv_conv(const float *in, float *out)
{
    union {
        float f;
        int32_t i;
    } bits;
    bits.f = in[1];
    out[0] = (float)(int32_t)in[0];
    out[1] = (float)(uint32_t)in[1];
    out[2] = (float)bits.i;
}

/* avr-libc functions that run __fp_powser on their own coefficient tables */
void drv_libm(const float *in, float *out)
{
    union {
        float f;
        int32_t i;
    } bits;
    bits.f = in[1];
    out[4] = ldexpf(in[0], (int16_t)bits.i);
    out[0] = logf(fabsf(in[0]));
    out[1] = atanf(in[0]);
    out[2] = expf(in[1]);
    out[3] = tanhf(in[1]);
}

/* float operators with constant operands (context tags of nnbuild/wcet/avr_paths.py) */
void drv_const(const float *in, float *out)
{
    out[0] = in[0] * 0.01f;
    out[1] = 3.0f * in[1];
    out[2] = 2.0f / in[0];
    out[3] = 1.0f / in[1];
    out[4] = 0.5f * in[0];
}

/* cosf: the range reduction __fp_rempio2 (the TPG code shapes call cos) */
void drv_trig(const float *in, float *out)
{
    out[0] = cosf(in[0]);
}

/* All drivers in one call, so one simulation exercises every table loop (20 outputs). */
void drv_all(const float *in, float *out)
{
    drv_add(in, out);
    drv_mul(in, out + 2);
    drv_div(in, out + 3);
    drv_cmp(in, out + 4);
    drv_exp(in, out + 5);
    drv_conv(in, out + 6);
    drv_libm(in, out + 9);
    drv_const(in, out + 14);
    drv_trig(in, out + 19);
}
