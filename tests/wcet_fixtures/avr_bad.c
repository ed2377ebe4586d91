/* Code the analyser must refuse: an unbounded data-dependent loop, recursion, an indirect call. */
#include <stdint.h>

uint8_t bad_while(const uint8_t *p)
{
    uint8_t n = 0;
    while (*p++ != 0) {
        n++;
    }
    return n;
}

int16_t bad_rec(int16_t n)
{
    if (n < 2) {
        return n;
    }
    return (int16_t)(bad_rec((int16_t)(n - 1)) + bad_rec((int16_t)(n - 2)));
}

static int16_t twice(int16_t x)
{
    return (int16_t)(2 * x);
}

static int16_t negate(int16_t x)
{
    return (int16_t)-x;
}

int16_t (*volatile bad_table[2])(int16_t) = {twice, negate};

int16_t bad_icall(int16_t x)
{
    return bad_table[x & 1](x);
}

void bad_entry(const void *in, void *out)
{
    const int16_t *v = (const int16_t *)in;
    int16_t *o = (int16_t *)out;
    o[0] = bad_while((const uint8_t *)in);
    o[1] = bad_rec(v[0]);
    o[2] = bad_icall(v[1]);
}
