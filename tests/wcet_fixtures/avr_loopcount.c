/*
 * avr_loopcount: per-case loop iteration counts under libsimavr, to verify the bounds of
 * nnbuild/wcet/avr_libloops.json (test helper; cycles come from nnbuild/runners/simavr_run.c).
 *
 * Usage: avr_loopcount ELF MCU READY IN N_IN_BYTES LOOPS < cases
 *   LOOPS: "h1+h2:lo-hi,lo-hi;h3:lo-hi" (hex byte addresses: the loop's header(s), then the body
 *   ranges [lo, hi)).
 * For each case (N_IN_BYTES from stdin written to IN when the PC reaches READY) prints one line
 * with, per loop, the most header executions in one entry into the loop. An entry is a header hit
 * whose previous instruction lies outside the body ranges.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_avr.h"
#include "sim_elf.h"

#define MAXL 64
#define MAXR 64

#define MAXH 4

struct loop { int nh; uint32_t hdr[MAXH]; int nr; uint32_t lo[MAXR], hi[MAXR]; unsigned cur, max; };

static int is_header(const struct loop *l, uint32_t pc)
{
    for (int i = 0; i < l->nh; ++i)
        if (pc == l->hdr[i])
            return 1;
    return 0;
}

static int in_body(const struct loop *l, uint32_t pc)
{
    for (int i = 0; i < l->nr; ++i)
        if (pc >= l->lo[i] && pc < l->hi[i])
            return 1;
    return 0;
}

static void quiet(avr_t *avr, const int level, const char *fmt, va_list ap)
{
    (void)avr; (void)level; (void)fmt; (void)ap;
}

static int parse_loops(char *s, struct loop *ls)
{
    int n = 0;
    for (char *tok = strtok(s, ";"); tok && n < MAXL; tok = strtok(NULL, ";")) {
        struct loop *l = &ls[n++];
        memset(l, 0, sizeof *l);
        do {
            if (*tok == '+')
                ++tok;
            l->hdr[l->nh++] = strtoul(tok, &tok, 16);
        } while (*tok == '+' && l->nh < MAXH);
        while (*tok == ':' || *tok == ',') {
            ++tok;
            l->lo[l->nr] = strtoul(tok, &tok, 16);
            ++tok; /* '-' */
            l->hi[l->nr] = strtoul(tok, &tok, 16);
            ++l->nr;
        }
    }
    return n;
}

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: avr_loopcount ELF MCU READY IN N_IN_BYTES LOOPS\n");
        return 1;
    }
    elf_firmware_t fw;
    memset(&fw, 0, sizeof fw);
    avr_global_logger_set(quiet);
    if (elf_read_firmware(argv[1], &fw) != 0)
        return 1;
    snprintf(fw.mmcu, sizeof fw.mmcu, "%s", argv[2]);
    fw.frequency = 20000000;
    uint32_t ready = strtoul(argv[3], NULL, 0), in = strtoul(argv[4], NULL, 0) & 0xffff;
    size_t nin = strtoul(argv[5], NULL, 0);
    struct loop ls[MAXL];
    int nl = parse_loops(argv[6], ls);
    avr_t *avr = avr_make_mcu_by_name(fw.mmcu);
    avr_init(avr);
    avr_load_firmware(avr, &fw);
    uint32_t prev = 0;
    int have = 0;
    uint64_t limit = 0;
    for (;;) {
        int state = avr_run(avr);
        uint32_t pc = avr->pc;
        if (state == cpu_Crashed || state == cpu_Done || pc == 0 || avr->cycle - limit > 50000000ull) {
            fprintf(stderr, "avr_loopcount: firmware stopped at 0x%x\n", pc);
            return 4;
        }
        for (int i = 0; i < nl; ++i) {
            struct loop *l = &ls[i];
            if (!is_header(l, pc))
                continue;
            l->cur = in_body(l, prev) ? l->cur + 1 : 1;
            if (l->cur > l->max)
                l->max = l->cur;
        }
        if (pc == ready) {
            if (have) {
                for (int i = 0; i < nl; ++i) {
                    printf(i ? " %u" : "%u", ls[i].max);
                    ls[i].max = ls[i].cur = 0;
                }
                putchar('\n');
            }
            if (fread(avr->data + in, 1, nin, stdin) != nin)
                return fflush(stdout) ? 1 : 0;
            have = 1;
            limit = avr->cycle;
        }
        prev = pc;
    }
}
