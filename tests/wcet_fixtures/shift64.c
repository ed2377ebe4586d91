/* 64-bit shifts through libgcc's __ashldi3, __ashrdi3 (falls through into __lshrdi3), __lshrdi3
 * and __rotldi3: value in r25:r18, count in r16. Measured under simavr to check their
 * avr_libloops.json entries (every count 0..255) and the analyser's call-site register contexts
 * (tests/test_wcet_avr_shifts.py). */
#include <stdint.h>
#include <string.h>

/* the routine called directly with any count byte (C never shifts by 64 or more, but the bound
 * must not rely on it) */
#define LIBCALL(name, routine)                                          \
    static uint64_t name(uint64_t x, uint8_t n)                         \
    {                                                                   \
        register uint64_t acc __asm__("r18") = x;                       \
        register uint8_t cnt __asm__("r16") = n;                        \
        __asm__ __volatile__("call " routine : "+r"(acc) : "r"(cnt));   \
        return acc;                                                     \
    }

LIBCALL(call_lshr, "__lshrdi3")
LIBCALL(call_ashr, "__ashrdi3")
LIBCALL(call_ashl, "__ashldi3")
LIBCALL(call_rotl, "__rotldi3")

/* in: x (8 bytes), count (1 byte); out: the four results */
void drv_shift_var(const void *in, void *out)
{
    const uint8_t *b = in;
    uint64_t x, r[4];
    memcpy(&x, b, sizeof x);
    r[0] = call_lshr(x, b[8]);
    r[1] = call_ashr(x, b[8]);
    r[2] = call_ashl(x, b[8]);
    r[3] = call_rotl(x, b[8]);
    memcpy(out, r, sizeof r);
}

static uint64_t rotl(uint64_t x, unsigned n)
{
    return (x << n) | (x >> (64 - n));
}

/* constant counts, as generated code has them (ldi r16, N before each call) */
void drv_shift_const(const void *in, void *out)
{
    uint64_t x, r[4];
    int64_t s;
    memcpy(&x, in, sizeof x);
    s = (int64_t)x;
    r[0] = (x >> 1) ^ (x >> 8) ^ (x >> 15) ^ (x >> 33) ^ (x >> 58);
    r[1] = (uint64_t)((s >> 7) ^ (s >> 15) ^ (s >> 24) ^ (s >> 47) ^ (s >> 62));
    r[2] = (x << 3) ^ (x << 16) ^ (x << 31) ^ (x << 47) ^ (x << 61);
    r[3] = rotl(x, 1) ^ rotl(x, 13) ^ rotl(x, 40) ^ rotl(x, 51) ^ rotl(x, 63);
    memcpy(out, r, sizeof r);
}
