/* Data-dependent branches: float ReLU and a leaky variant over 10 values. */
void relu_f(const float *in, float *out)
{
    for (unsigned char i = 0; i < 10; i++) {
        float x = in[i];
        if (x > 0.0f) {
            out[i] = x;
        } else {
            out[i] = 0.01f * x;
        }
    }
}
