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
    int32_t i = (int32_t)in[0];
    uint32_t u = (uint32_t)in[1];
    out[0] = (float)i;
    out[1] = (float)u;
    out[2] = (float)(int32_t)(*(const int32_t *)&in[1]);
}
