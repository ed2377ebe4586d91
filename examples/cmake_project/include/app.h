#ifndef APP_H
#define APP_H

#define APP_RAYS 61

/* Sensor stand-in: fills `scan` with normalised LiDAR ranges. */
void lidar_scan(float scan[APP_RAYS]);

/* Steering in degrees from the network's output in [-1, 1]. */
float steering_deg(float y);

/* The XOR network as a safety interlock: both inputs high or both low -> 0. */
unsigned char interlock(float a, float b);

#endif
