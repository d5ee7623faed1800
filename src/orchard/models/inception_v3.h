// Inception-v3 (Szegedy et al. 2016, "Rethinking the Inception Architecture") as torchvision's
// inception_v3 (torchvision 0.14 models/inception.py): parameter and buffer names and shapes
// match torchvision's state dict (Conv2d_1a_3x3.conv.weight, Conv2d_1a_3x3.bn.running_mean,
// Mixed_5b.branch1x1.conv.weight, ..., AuxLogits.fc.weight, fc.weight), in torchvision's order,
// so its ImageNet weights import by name. Every convolution is a BasicConv2d: conv (no bias) ->
// batch norm (eps 0.001) -> ReLU, children "conv" and "bn".
//
// Input: float [N, 3, H, W], H and W >= 75 (torchvision's minimum; the auxiliary classifier
// needs >= 299), channels_last memory format welcome. ImageNet weights expect 299x299 RGB
// scaled to [-1, 1] (TF-Slim's inception preprocessing), or torchvision's mean/std-normalised
// RGB with transform_input.
// Output of forward: logits [N, num_classes], or the pooled features [N, num_features()] (2048;
// after dropout) when num_classes is 0.
//
// depth_multiplier < 1 thins every convolution as TF-Slim's inception_v3(depth_multiplier,
// min_depth) does (channels max(int(c * multiplier), min_depth)): the same architecture at a
// fraction of the cost, for small data and CPU tests. ImageNet weights exist for 1 only.
//
// Used as the image encoder of im2txt (features) and as a classification backbone.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <memory>

#include "orchard/models/image_model.h"
#include "orchard/models/tf_names.h"

namespace orchard::models {

struct InceptionV3Options {
  // 0: no fc; forward returns the pooled 2048 features (after dropout).
  int64_t num_classes = 1000;
  // The auxiliary classifier on Mixed_6e (torchvision's AuxLogits; needs num_classes >= 1).
  // torchvision's inception_v3 builds it by default and its ImageNet state dict holds it: load
  // that with aux_logits = true (or drop the AuxLogits.* entries).
  bool aux_logits = false;
  double dropout = 0.5;  // torchvision's p, before fc (TF-Slim: dropout_keep_prob 0.8)
  // Torch convention (1 - TF decay): im2txt's batch norm decay 0.9997 is momentum 0.0003.
  double batch_norm_momentum = 0.1;
  // Map torchvision-normalised input ((x - mean) / std with ImageNet's mean and std) to the
  // [-1, 1] scaling the ported Google weights were trained with, as torchvision does.
  bool transform_input = false;
  // Convolutions drawn as torchvision (and TF-Slim, im2txt's encoder) draw them, normal(0, 0.1)
  // truncated at +-2, instead of He init. Training from scratch with Adam, this is the one
  // that learns shape kinds at 75 px (docs/caption.md); a never-trained frozen network's
  // features explode with it (see the .cc), so He stays the default.
  bool torchvision_init = false;
  // TF-Slim's depth_multiplier and min_depth (see above); 1 is the published network.
  double depth_multiplier = 1.0;
  int64_t min_depth = 16;
  // The branches' 3x3 average pools leave their zero padding out of the border averages, as
  // TF-Slim's 'SAME' avg_pool does (torchvision counts it): for TF-Slim's weights.
  bool tf_avg_pool = false;
  // Every BasicConv2d's batch norm epsilon and activation (ReLU; relu6 true: ReLU6, as the OD
  // API's ssd_inception_v3 under its conv_hyperparams).
  double bn_eps = 0.001;
  bool relu6 = false;
};

// Where both outputs of a training step are needed.
struct InceptionV3Output {
  torch::Tensor logits;  // [N, num_classes]
  torch::Tensor aux;     // [N, num_classes]; undefined unless aux_logits and training
};

namespace inception {
// The building blocks, as torchvision's classes of the same names (defined in the .cc).
class BasicConv2dImpl;
class InceptionAImpl;
class InceptionBImpl;
class InceptionCImpl;
class InceptionDImpl;
class InceptionEImpl;
class InceptionAuxImpl;
}  // namespace inception

class InceptionV3Impl : public ImageModelImpl {
 public:
  explicit InceptionV3Impl(const InceptionV3Options& options = {});

  // Logits [N, num_classes], or the pooled features [N, 2048] after dropout when num_classes
  // is 0. Never runs the auxiliary classifier.
  torch::Tensor forward(torch::Tensor x) override;
  // forward plus, with aux_logits in training mode, the auxiliary classifier's logits (as
  // torchvision's forward in training); in eval mode `aux` stays undefined, as torchvision's.
  InceptionV3Output forward_with_aux(const torch::Tensor& x);
  // Globally average-pooled output of Mixed_7c, [N, num_features()], before dropout: the image
  // embedding im2txt projects.
  torch::Tensor features(torch::Tensor x) override;

  // The OD API's ssd_inception_v3 feature maps: Mixed_5d, Mixed_6e, Mixed_7c (288, 768, 2048
  // channels at depth multiplier 1; 35x35, 17x17, 8x8 at 299 or 300).
  std::vector<torch::Tensor> mixed_5d_6e_7c(const torch::Tensor& x);
  std::vector<int64_t> mixed_5d_6e_7c_channels() const;
  // Mixed_5d's side for an input side (the 'VALID' stem); Mixed_6a and Mixed_7a each map x to
  // (x - 3) / 2 + 1.
  static int64_t mixed_5d_size(int64_t side);

  // Mixed_7c's channels: 2048 at depth multiplier 1.
  int64_t num_features() const { return num_features_; }
  const InceptionV3Options& options() const { return options_; }

 private:
  // Pooled [N, 2048]; also the auxiliary logits into *aux when aux is non-null, AuxLogits
  // exists and the module is training.
  torch::Tensor pooled(const torch::Tensor& x, torch::Tensor* aux);

  InceptionV3Options options_;
  int64_t num_features_ = 0;
  // Registered by the constructor in torchvision's order, so parameters and buffers list in its
  // state_dict order (max-pools, avgpool and dropout have no state and are functional calls).
  std::shared_ptr<inception::BasicConv2dImpl> Conv2d_1a_3x3, Conv2d_2a_3x3, Conv2d_2b_3x3, Conv2d_3b_1x1, Conv2d_4a_3x3;
  std::shared_ptr<inception::InceptionAImpl> Mixed_5b, Mixed_5c, Mixed_5d;
  std::shared_ptr<inception::InceptionBImpl> Mixed_6a;
  std::shared_ptr<inception::InceptionCImpl> Mixed_6b, Mixed_6c, Mixed_6d, Mixed_6e;
  std::shared_ptr<inception::InceptionAuxImpl> AuxLogits;  // null without aux_logits
  std::shared_ptr<inception::InceptionDImpl> Mixed_7a;
  std::shared_ptr<inception::InceptionEImpl> Mixed_7b, Mixed_7c;
  torch::nn::Linear fc{nullptr};  // null when num_classes is 0
};
TORCH_MODULE(InceptionV3);

// TF-Slim's name (nets/inception_v3.py, scope "InceptionV3") of an Inception-v3 variable:
// BasicConv2d X -> "<slim scope>/weights" and its batch norm (scale=False: no gamma, 1),
// fc -> Logits/Conv2d_1c_1x1 (a 1x1 convolution; 1001 classes, 0 the background), AuxLogits
// likewise. Throws std::invalid_argument for a name Inception-v3 does not have.
std::optional<TfName> inception_v3_tf_name(const std::string& orchard_name);

}  // namespace orchard::models
