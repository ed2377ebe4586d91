/* Two models in one firmware: the F1/10 steering network and an XOR interlock. */
#include "app.h"
#include "steer.h"

#if APP_VERSION != 3
#error "the project's own CPPDEFINES must reach its sources"
#endif

volatile float steering;
volatile unsigned char armed;

int main(void)
{
    float scan[APP_RAYS];
    float y[STEER_OUTPUTS];
    lidar_scan(scan);
    steer_infer(scan, y);
    armed = interlock(scan[0] > 0.0f ? 1.0f : 0.0f, 1.0f);
    steering = armed ? steering_deg(y[0]) : 0.0f;
    return 0;
}
