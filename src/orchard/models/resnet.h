// ResNet v1.5 (stride on the 3x3 conv of the bottleneck), as TF Models' resnet_model.py
// and torchvision's resnet: parameter names and shapes match torchvision's state dict
// (conv1, bn1, layer1.0.conv1, ..., layerN.M.downsample.{0,1}, fc), so its weights import.
//
// Input: float32 [N, 3, H, W] (channels_last memory format welcome), mean-subtracted RGB.
// Output: logits [N, num_classes].
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <functional>
#include <string>
#include <vector>

#include "orchard/models/image_model.h"
#include "orchard/models/tf_names.h"

namespace orchard::models {

// Where a ResNet's strides and padding are, by the framework its weights come from (the
// variables are the same in all three; only the function differs):
//   kTorchvision  v1.5: stride on the 3x3 conv of each stage's first block, symmetric padding
//   kKeras        TF Model Garden's Keras ResNet-50 (resnet_model.py): v1.5 with TF 'SAME'
//                 padding in the stride-2 3x3 convs and the stem's max-pool (bottom/right)
//   kSlim         TF-Slim's resnet_v1: the stride in the LAST unit of stages 1-3 (its 3x3 conv,
//                 symmetric padding; the shortcut subsamples, x[::2, ::2]), stage 4 stride 1,
//                 the stem's max-pool 'SAME'
enum class ResNetLayout { kTorchvision, kKeras, kSlim };

struct ResNetOptions {
  std::string block = "bottleneck";  // "basic" (18/34) or "bottleneck" (50+)
  std::vector<int64_t> layers = {3, 4, 6, 3};
  int64_t num_classes = 1000;
  int64_t base_width = 64;          // channels of the stem and layer1 (64 in the paper)
  bool small_input = false;         // 3x3 stride-1 stem, no max-pool (inputs <= 64 px)
  bool zero_init_residual = false;  // gamma = 0 in each block's last BN
  double bn_momentum = 0.1;         // TF momentum 0.9 == torch momentum 0.1
  double bn_eps = 1e-5;
  bool initialize = true;                            // false: leave torch's default init (weights restored next)
  ResNetLayout layout = ResNetLayout::kTorchvision;  // kKeras / kSlim: bottleneck blocks only
  bool include_top = true;                           // false: no fc (a detection backbone)
  int num_stages = 4;                                // 3: no layer4 (Faster R-CNN's first stage ends at block3)
};

class ResNetImpl : public ImageModelImpl {
 public:
  explicit ResNetImpl(const ResNetOptions& options);
  torch::Tensor forward(torch::Tensor x) override;
  // Globally average-pooled features [N, C] (the TF-Hub feature-vector output).
  torch::Tensor features(torch::Tensor x) override;
  const ResNetOptions& options() const { return options_; }
  // TF-Slim's resnet_v1 with store_non_strided_activations (the OD API's ResNet FPN feature
  // extractors): the outputs of stages 1..`stages` ("block1".."block4") before each stage's
  // last unit subsamples, at strides 4, 8, 16, 32. kSlim bottleneck ResNets only.
  std::vector<torch::Tensor> slim_stage_outputs(torch::Tensor x, int stages = 4);
  // TF-Slim's resnet_v1 up to block3 with output_stride 16 (block3's strided last unit runs at
  // stride 1) or 8 (block2's too, and block3's units with their 3x3 convolutions at rate 2), as
  // the OD API's Faster R-CNN first stage calls it. kSlim bottleneck ResNets only.
  torch::Tensor slim_block3(torch::Tensor x, int64_t output_stride);
  // Channels of stage s (1..4): base_width * 2^(s-1) * 4.
  int64_t stage_channels(int stage) const { return options_.base_width * (int64_t{1} << (stage - 1)) * 4; }

 private:
  torch::Tensor stem(torch::Tensor x);
  torch::nn::Sequential make_layer(int64_t planes, int64_t blocks, int64_t stride);

  ResNetOptions options_;
  int64_t inplanes_;
  torch::nn::Conv2d conv1{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr};
  torch::nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr}, layer4{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(ResNet);

// One stage of `units` blocks of `planes` (x4 out for bottlenecks) on in_channels, as
// ResNetImpl builds its layers for `o` (strides, projection shortcut), initialised as they are:
// e.g. the block4 a Faster R-CNN's second stage runs on its crops (kSlim, stride 1).
torch::nn::Sequential resnet_stage(int64_t in_channels, int64_t planes, int64_t units, int64_t stride,
                                   const ResNetOptions& o);

// TensorFlow names of a ResNet's variables (models/resnet_tf.cc). TF-Slim's resnet_v1_N under
// `scope` ("resnet_v1_50"): conv1, blockL/unit_U/bottleneck_v1/{conv1,conv2,conv3,shortcut},
// logits (a 1x1 convolution). Model Garden's Keras ResNet-50: conv1, bn_conv1, res2a_branch2a,
// bn2a_branch2a, ..., res2a_branch1, fc1000 (dense), the layer names a tf.train.Checkpoint
// records as each variable's full name. Both throw std::invalid_argument for other names.
std::optional<TfName> resnet_v1_slim_tf_name(const std::string& orchard_name, const std::string& scope);
std::optional<TfName> resnet_keras_tf_name(const std::string& orchard_name);

}  // namespace orchard::models
