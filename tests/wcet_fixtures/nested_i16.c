/* int16 matrix-vector product, nested loops 6 x 10, with a saturating clamp. */
#include <stdint.h>

void nested_i16(const int16_t *in, int16_t *out)
{
    static const int16_t w[6][10] = {
        {1, -2, 3, -4, 5, -6, 7, -8, 9, -10},
        {300, 200, -100, 50, 25, -12, 6, -3, 1, 0},
        {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1},
        {1000, -1000, 1000, -1000, 1000, -1000, 1000, -1000, 1000, -1000},
        {7, 7, 7, 7, 7, 7, 7, 7, 7, 7},
        {-32768, 32767, 0, 1, 2, 3, 4, 5, 6, 7},
    };
    for (uint8_t o = 0; o < 6; o++) {
        int32_t acc = 0;
        for (uint8_t i = 0; i < 10; i++) {
            acc += (int32_t)w[o][i] * in[i];
        }
        if (acc > 32767) {
            acc = 32767;
        } else if (acc < -32768) {
            acc = -32768;
        }
        out[o] = (int16_t)acc;
    }
}
