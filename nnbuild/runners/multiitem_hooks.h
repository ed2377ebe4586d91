/*
 * Hooks of nnbuild's multi-item check program, force-included (-include) into a generated
 * multi-item system: every transition the items fire is recorded in order with its time, so is the
 * start of each segment, and each item's thread starts after the run's random delay.
 */
#ifndef NNBUILD_MULTIITEM_HOOKS_H
#define NNBUILD_MULTIITEM_HOOKS_H

void nn_mi_record(int code);
void nn_mi_begin(int code);
void nn_mi_delay(int item);

#define NN_MI_EVENT(code) nn_mi_record(code)
#define NN_MI_BEGIN(code) nn_mi_begin(code)
#define NN_MI_ITEM_START(item) nn_mi_delay(item)

#endif
