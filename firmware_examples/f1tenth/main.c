/* F1/10 steering controller firmware: one control step every 100 ms.
 *
 * The network (61 LiDAR rays -> 128 tanh -> 128 tanh -> 1 tanh) maps normalised ranges to a
 * steering command in [-1, 1]; the car steers clip(15 * y, -15, 15) degrees (Ivanov et al., HSCC
 * 2020). Sensor and actuator I/O are board specific; here they are a fixed scan and a volatile
 * output so the program is complete and runs on any target.
 */
#include "f1tenth.h"

#define RAYS F1TENTH_INPUTS
#define MAX_RANGE_M 5.0f

volatile float steering_deg;

/* LiDAR range in metres for ray i (stand-in for the sensor driver): a left-hand corner. */
static float lidar_range(int i)
{
    return i < RAYS / 2 ? 1.2f + 0.05f * (float)i : MAX_RANGE_M;
}

/* Normalisation used in training: (range - 2.5) / 5, ranges capped at 5 m. */
static float normalise(float range_m)
{
    if (range_m > MAX_RANGE_M) {
        range_m = MAX_RANGE_M;
    }
    return (range_m - 2.5f) / 5.0f;
}

static float steering_from(float y)
{
    float deg = 15.0f * y;
    return deg > 15.0f ? 15.0f : (deg < -15.0f ? -15.0f : deg);
}

int main(void)
{
    float scan[RAYS];
    float y[F1TENTH_OUTPUTS];
    for (int i = 0; i < RAYS; ++i) {
        scan[i] = normalise(lidar_range(i));
    }
    f1tenth_infer(scan, y);
    steering_deg = steering_from(y[0]);
    return 0;
}
