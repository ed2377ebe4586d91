/* Fishing Derby agent firmware: one action per frame from a Tangled Program Graph.
 *
 * The TPG (GEGELATI, SiPS'22 artifacts) reads the screen as a 42x32 grid of colour-flag bytes
 * passed as doubles, row-major (screen[r * 32 + c]), and returns an action id of ALE's 18-action
 * set. Frame capture and joystick output are board specific; here they are a fixed synthetic
 * frame and a volatile output so the program is complete and runs on any target.
 */
#include "tpg_fishing_derby.h"

#define ROWS 42
#define COLS 32

volatile int joystick_action;

/* Colour flags of grid cell (r, c) (stand-in for the frame grabber): water below row 12, a boat
 * and a line. Each bit is one grey level seen in the cell. */
static unsigned char cell_flags(int r, int c)
{
    if (r < 12) {
        return 4u;
    }
    if (r == 12 && c >= 4 && c < 10) {
        return 133u;
    }
    return (c == 7) ? 5u : 1u;
}

int main(void)
{
    static double screen[TPG_FISHING_DERBY_INPUTS];
    for (int r = 0; r < ROWS; ++r) {
        for (int c = 0; c < COLS; ++c) {
            screen[r * COLS + c] = (double)cell_flags(r, c);
        }
    }
    joystick_action = tpg_fishing_derby_infer(screen);
    return 0;
}
