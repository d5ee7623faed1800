// Models with random weights for the export tests (export_cli_test.cc, export_tflite_test.cc).
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace at {
class Tensor;
}

namespace orchard::test {

// A `task` (classify | multilabel) model_dir holding `arch` with random weights and batch-norm
// statistics (those of one batch of inputs of input_scale(arch)); returns its model (the task's
// module), in eval mode.
std::shared_ptr<torch::nn::Module> write_model_dir(const std::string& dir, const std::string& task,
                                                   const std::string& arch, int image_size);

// The spread of the preprocessed input: RGB minus the means for the ResNets, [-1, 1] for Inception.
double input_scale(const std::string& arch);

// RGB values in [0, 255] ([N, 3, H, W]) preprocessed as Orchard feeds `arch` (minus the ImageNet
// means; Inception: * 2/255 - 1): what an export with --include_preprocessing does itself.
at::Tensor scale_rgb(const std::string& arch, const at::Tensor& rgb);

}  // namespace orchard::test

namespace orchard::test {

// Runs a .tflite file in Arm NN (tests/cli/armnn_tflite.py: its TfLite parser and reference CPU
// backend, Debian's python3-pyarmnn) on `input` (its one input tensor's values, float or uint8,
// the graph's shape; `runs` > 1: that many inputs stacked), in the folder `work`; returns the
// outputs in the graph's order, as float ([runs, ...] where runs > 1).
std::vector<at::Tensor> run_tflite_in_armnn(const std::string& tflite, const at::Tensor& input, const std::string& work,
                                            int64_t runs = 1);

// COCO AP50 of a detection .tflite (uint8 input, TFLite_Detection_PostProcess's outputs) run by
// Arm NN on the detection TFRecords `records`, each image resized to size x size as Orchard's
// evaluation does and fed as the converter's uint8 (mean 128, std 128); `work` its folder.
double tflite_detection_ap50(const std::string& tflite, const std::string& records, int64_t size, int64_t num_classes,
                             const std::string& work);

}  // namespace orchard::test
