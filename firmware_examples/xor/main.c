/* XOR firmware: evaluates the 2-2-1 network on the four Boolean inputs. */
#include "xor.h"

volatile unsigned char truth_table;

int main(void)
{
    static const float cases[4][XOR_INPUTS] = {{0.0f, 0.0f}, {0.0f, 1.0f}, {1.0f, 0.0f}, {1.0f, 1.0f}};
    unsigned char table = 0;
    for (int k = 0; k < 4; ++k) {
        float y[XOR_OUTPUTS];
        xor_infer(cases[k], y);
        table |= (unsigned char)((y[0] > 0.5f) << k);
    }
    truth_table = table;
    return 0;
}
