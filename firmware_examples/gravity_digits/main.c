/* Gravity digits firmware: a device that learns. It initialises its blob, then repeats: recognise
 * the current 8x8 image (activate) and learn from the label it is told (train). Here the image and
 * label are fixed stand-ins for a sensor and a user's correction. */
#include "gravity_digits.h"

static float blob[GRAVITY_DIGITS_MEMORY_SIZE / sizeof(float)];
volatile unsigned char guess;

int main(void)
{
    static float image[GRAVITY_DIGITS_INPUTS];
    static float label[GRAVITY_DIGITS_OUTPUTS];
    digits_initialize(blob, 1u);
    for (int i = 0; i < GRAVITY_DIGITS_INPUTS; ++i)
        image[i] = (float)((i * 7) & 15) / 16.0f;
    label[3] = 1.0f;
    for (int step = 0; step < 4; ++step) {
        const float *p = (const float *)digits_activate(blob, image);
        unsigned char best = 0;
        for (unsigned char k = 1; k < GRAVITY_DIGITS_OUTPUTS; ++k)
            if (p[k] > p[best]) best = k;
        guess = best;
        digits_train(blob, image, label);
    }
    return 0;
}
