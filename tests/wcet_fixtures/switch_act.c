/* A switch on a per-element selector byte (a small activation dispatch). */
#include <stdint.h>

void switch_act(const int16_t *in, int16_t *out)
{
    for (uint8_t i = 0; i < 4; i++) {
        int16_t x = in[2 * i];
        uint8_t sel = (uint8_t)in[2 * i + 1];
        switch (sel & 7) {
        case 0:
            out[i] = x;
            break;
        case 1:
            out[i] = x > 0 ? x : 0;
            break;
        case 2:
            out[i] = x > 0 ? x : (int16_t)(x / 8);
            break;
        case 3:
            out[i] = (int16_t)(x * 3 + 1);
            break;
        default:
            out[i] = (int16_t)-x;
            break;
        }
    }
}
