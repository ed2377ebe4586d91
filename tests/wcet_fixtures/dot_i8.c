/* int8 dot product with a literal trip count (16). */
#include <stdint.h>

void dot_i8(const int8_t *in, int32_t *out)
{
    static const int8_t w[16] = {3, -7, 12, 127, -128, 5, 9, -1, 44, -90, 17, 2, -3, 81, 64, -66};
    int32_t acc = 0;
    for (uint8_t i = 0; i < 16; i++) {
        acc += (int16_t)in[i] * w[i];
    }
    *out = acc;
}
