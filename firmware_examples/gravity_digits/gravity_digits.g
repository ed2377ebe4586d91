// A digit recogniser that learns on the device: 8x8 images (scikit-learn's digits, pixels / 16),
// 64 -> 16 relu -> 10 softmax, cross-entropy, one sample per SGD step. The blob is 9,888 bytes
// (float), inside the ATmega1284's 16 KB of RAM; memory_hard (weights and activations) is 4,944.
.module "gravity_digits";
.prefix "digits";
.optimizer sgd 0.1;
.precision float;
.costfnc cross_entropy;
.batch 1;
.input 8 * 8;
.hidden 16 relu;
.output 10 softmax;
