/* tanh activation over 6 values via expf: 1 - 2 / (exp(2x) + 1), clamped to stay NaN-free. */
#include <math.h>

void tanh_exp(const float *in, float *out)
{
    for (unsigned char i = 0; i < 6; i++) {
        float x = in[i];
        if (x > 15.0f) {
            x = 15.0f;
        } else if (x < -15.0f) {
            x = -15.0f;
        }
        out[i] = 1.0f - 2.0f / (expf(2.0f * x) + 1.0f);
    }
}
