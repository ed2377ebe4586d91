#include <stdint.h>
int32_t dot(const int8_t *a, const int8_t *b);
static const int8_t A[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
static const int8_t B[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
int32_t dot(const int8_t *a, const int8_t *b)
{
    int32_t acc = 0;
    for (int i = 0; i < 16; i++) {
        acc += a[i] * b[i];
    }
    return acc;
}
int main(void)
{
    return dot(A, B) == 136 ? 0 : 1;
}
