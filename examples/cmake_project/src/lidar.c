#include "app.h"

#define MAX_RANGE_M 5.0f

/* A GNU statement expression: fine for this project's -std=gnu11, refused by -pedantic -Werror
 * (the board's policy for generated code, which nnbuild does not force on the user's sources). */
#define CLAMP(x, hi) ({ float v_ = (x); v_ > (hi) ? (hi) : v_; })

void lidar_scan(float scan[APP_RAYS])
{
    for (int i = 0; i < APP_RAYS; ++i) {
        float range = i < APP_RAYS / 2 ? 1.2f + 0.05f * (float)i : 7.0f;
        scan[i] = (CLAMP(range, MAX_RANGE_M) - 2.5f) / 5.0f;
    }
}
