#include "app.h"
#include "xor.h"

float steering_deg(float y)
{
    float deg = 15.0f * y;
    return deg > 15.0f ? 15.0f : (deg < -15.0f ? -15.0f : deg);
}

unsigned char interlock(float a, float b)
{
    float in[XOR_INPUTS] = {a, b};
    float out[XOR_OUTPUTS];
    xor_infer(in, out);
    return (unsigned char)(out[0] > 0.5f);
}
