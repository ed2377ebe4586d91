.module "mnist"; // output: mnist.[h|c]
.prefix "mnist";
.optimizer sgd 0.1;
.precision float;
.costfnc cross_entropy;
.batch 8;
.input 28 * 28;
.output 10 softmax;
.hidden 100 relu; // first hidden layer
.hidden 100 relu; // second hidden layer
