/* Generated-style float dense layer (8 x 12) + ReLU: MAC loops calling __mulsf3/__addsf3,
 * weights in flash read with pgm_read_float. */
#include <avr/pgmspace.h>

static const float W[8][12] PROGMEM = {
    {0.5f, -0.25f, 1.5f, 2.0f, -3.0f, 0.125f, 0.75f, -1.0f, 0.3f, -0.7f, 0.9f, 1.1f},
    {-0.5f, 0.25f, -1.5f, -2.0f, 3.0f, -0.125f, -0.75f, 1.0f, -0.3f, 0.7f, -0.9f, -1.1f},
    {1e-3f, 2e-3f, 3e-3f, 4e-3f, 5e-3f, 6e-3f, 7e-3f, 8e-3f, 9e-3f, 1e-2f, 2e-2f, 3e-2f},
    {100.0f, -200.0f, 300.0f, -400.0f, 500.0f, -600.0f, 700.0f, -800.0f, 900.0f, -1.0f, 2.0f, -3.0f},
    {0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f},
    {-1.0f, 1.0f, -1.0f, 1.0f, -1.0f, 1.0f, -1.0f, 1.0f, -1.0f, 1.0f, -1.0f, 1.0f},
    {3.14159f, 2.71828f, 1.41421f, 1.73205f, 0.57721f, 1.61803f, 0.69315f, 2.30259f, 0.0f, 0.0f, 1.0f, -1.0f},
    {1e6f, -1e-6f, 1e3f, -1e-3f, 12.5f, -0.0625f, 7.0f, -9.0f, 0.33f, 0.66f, -0.99f, 4.0f},
};
static const float B[8] PROGMEM = {0.0f, 1.0f, -1.0f, 0.5f, -0.5f, 2.0f, -2.0f, 0.01f};

void fmac(const float *in, float *out)
{
    for (unsigned char o = 0; o < 8; o++) {
        float acc = pgm_read_float(&B[o]);
        for (unsigned char i = 0; i < 12; i++) {
            acc += pgm_read_float(&W[o][i]) * in[i];
        }
        out[o] = acc > 0.0f ? acc : 0.0f;
    }
}
