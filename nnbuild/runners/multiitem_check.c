/*
 * nnbuild's multi-item check program (host): runs a generated multi-item system and the unsplit
 * model it splits on the same inputs, many times, each item's thread starting after a random delay.
 *
 * Build with: -DNN_MI_HEADER=\"sys.h\" -DNN_MI_INFER=sys_infer -DNN_WHOLE_HEADER=\"whole.h\"
 *   -DNN_WHOLE_INFER=whole_infer -DNN_IN=<inputs> -DNN_OUT=<outputs> -DNN_ITEMS=<items>,
 *   the system's .c force-including multiitem_hooks.h.
 * Usage: check RUNS MAX_DELAY_US SEED < cases (little-endian float32 vectors of NN_IN values).
 * Per run, on stdout: NN_OUT float32 of the system, NN_OUT float32 of the unsplit model, an int32
 * event count, then that many int32 codes in the order they happened (a transition fired: its code;
 * an action started: -1 - the code of its first transition), then as many int64 CLOCK_MONOTONIC
 * nanoseconds, then NN_ITEMS int64: when each item's thread started (after its delay), then two
 * int64: the inference call and its return (host byte order).
 * Exit status: 0, 2 bad arguments or no case, 3 an I/O error, 4 an inference failed, 5 event overflow.
 */
#if !defined(_POSIX_C_SOURCE) || _POSIX_C_SOURCE < 200809L
#undef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include NN_MI_HEADER
#include NN_WHOLE_HEADER
#include "multiitem_hooks.h"

#define MAX_CASES 4096
#define MAX_EVENTS 4096

static float cases[MAX_CASES][NN_IN];
static int events[MAX_EVENTS];
static long long event_ns[MAX_EVENTS];
static int event_count;
static int event_overflow;
static long delays_us[NN_ITEMS];
static long long item_start_ns[NN_ITEMS];

static long long now_ns(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* A slot by a relaxed atomic increment, not a mutex: a lock here would order every two recording
 * threads for ThreadSanitizer and hide the races it must find. Events under one variable's lock
 * take their slots in that lock's order; the main thread reads the slots after the joins. */
void nn_mi_record(int code)
{
    int slot = __atomic_fetch_add(&event_count, 1, __ATOMIC_RELAXED);

    if (slot < MAX_EVENTS) {
        event_ns[slot] = now_ns();
        events[slot] = code;
    } else {
        __atomic_store_n(&event_overflow, 1, __ATOMIC_RELAXED);
    }
}

void nn_mi_begin(int code)
{
    nn_mi_record(-1 - code);
}

void nn_mi_delay(int item)
{
    struct timespec wait;
    long us = (item >= 0 && item < NN_ITEMS) ? delays_us[item] : 0;

    wait.tv_sec = us / 1000000L;
    wait.tv_nsec = (us % 1000000L) * 1000L;
    if (us > 0)
        nanosleep(&wait, NULL);
    if (item >= 0 && item < NN_ITEMS)
        item_start_ns[item] = now_ns(); /* its own slot; read after the join */
}

/* xorshift32: the run's delays from the seed, the same on every machine */
static unsigned next_random(unsigned *state)
{
    unsigned x = *state;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    *state = x;
    return x;
}

int main(int argc, char **argv)
{
    static float multi[NN_OUT], whole[NN_OUT];
    long long call_ns[2];
    long runs, max_delay, run;
    unsigned state;
    int count = 0, i;

    if (argc != 4)
        return 2;
    runs = atol(argv[1]);
    max_delay = atol(argv[2]);
    state = (unsigned)strtoul(argv[3], NULL, 10) | 1u;
    while (count < MAX_CASES && fread(cases[count], sizeof(float), NN_IN, stdin) == NN_IN)
        count++;
    if (count == 0 || runs < 0 || max_delay < 0)
        return 2;
    for (run = 0; run < runs; ++run) {
        const float *x = cases[run % count];
        int n;

        for (i = 0; i < NN_ITEMS; ++i)
            delays_us[i] = max_delay > 0 ? (long)(next_random(&state) % (unsigned)(max_delay + 1)) : 0;
        event_count = 0;
        memset(item_start_ns, 0, sizeof item_start_ns);
        call_ns[0] = now_ns();
        if (NN_MI_INFER(x, multi) != 0)
            return 4;
        call_ns[1] = now_ns();
        if (event_overflow)
            return 5;
        NN_WHOLE_INFER(x, whole);
        n = event_count < MAX_EVENTS ? event_count : MAX_EVENTS;
        if (fwrite(multi, sizeof(float), NN_OUT, stdout) != NN_OUT
            || fwrite(whole, sizeof(float), NN_OUT, stdout) != NN_OUT
            || fwrite(&n, sizeof n, 1, stdout) != 1
            || fwrite(events, sizeof(int), (size_t)n, stdout) != (size_t)n
            || fwrite(event_ns, sizeof(long long), (size_t)n, stdout) != (size_t)n
            || fwrite(item_start_ns, sizeof(long long), NN_ITEMS, stdout) != NN_ITEMS
            || fwrite(call_ns, sizeof(long long), 2, stdout) != 2)
            return 3;
    }
    return fflush(stdout) == 0 ? 0 : 3;
}
