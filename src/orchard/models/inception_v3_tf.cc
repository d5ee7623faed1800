// Orchard's Inception-v3 variable names (torchvision's) -> TF-Slim's (tensorflow/models
// research/slim/nets/inception_v3.py, `inception_v3` under scope "InceptionV3" with
// inception_v3_arg_scope), as in the published ImageNet checkpoint inception_v3_2016_08_28
// (inception_v3.ckpt, 1001 classes: class 0 is "background").
//
// TF-Slim's convolutions carry batch norm without scale (no gamma: 1) and no bias; only the two
// classifiers (Logits/Conv2d_1c_1x1, AuxLogits/Conv2d_2b_1x1: 1x1 convolutions without batch
// norm) have biases. Branch_N numbering and kernel shapes agree with torchvision's branch order
// in every Mixed block (checked against the slim source; see the table's comments). Layer names
// keep slim's quirks: Mixed_5c's Branch_1 is Conv2d_0b_1x1 -> Conv_1_0c_5x5 (not
// Conv2d_0a_1x1 -> Conv2d_0b_5x5 as in 5b and 5d), Mixed_6a's stride-2 3x3 convolutions are
// named Conv2d_1a_1x1, and Mixed_7b's Branch_1 3x1 is Conv2d_0b_3x1 where Mixed_7c's is
// Conv2d_0c_3x1.
#include <map>
#include <optional>
#include <stdexcept>
#include <string>

#include "orchard/models/tf_names.h"

namespace orchard::models {

namespace {

constexpr const char* kScope = "InceptionV3/";

// Orchard BasicConv2d module path -> TF-Slim scope under "InceptionV3/". Kernel HxW (torch
// kernel_size (H, W) = TF [H, W]) in the comments.
const std::map<std::string, std::string>& conv_scopes() {
  static const std::map<std::string, std::string> table = {
      // Stem.
      {"Conv2d_1a_3x3", "Conv2d_1a_3x3"},  // 3x3/2 valid, 32
      {"Conv2d_2a_3x3", "Conv2d_2a_3x3"},  // 3x3 valid, 32
      {"Conv2d_2b_3x3", "Conv2d_2b_3x3"},  // 3x3 same, 64
      {"Conv2d_3b_1x1", "Conv2d_3b_1x1"},  // 1x1, 80
      {"Conv2d_4a_3x3", "Conv2d_4a_3x3"},  // 3x3 valid, 192

      // InceptionA (35x35).
      {"Mixed_5b.branch1x1", "Mixed_5b/Branch_0/Conv2d_0a_1x1"},       // 1x1
      {"Mixed_5b.branch5x5_1", "Mixed_5b/Branch_1/Conv2d_0a_1x1"},     // 1x1
      {"Mixed_5b.branch5x5_2", "Mixed_5b/Branch_1/Conv2d_0b_5x5"},     // 5x5
      {"Mixed_5b.branch3x3dbl_1", "Mixed_5b/Branch_2/Conv2d_0a_1x1"},  // 1x1
      {"Mixed_5b.branch3x3dbl_2", "Mixed_5b/Branch_2/Conv2d_0b_3x3"},  // 3x3
      {"Mixed_5b.branch3x3dbl_3", "Mixed_5b/Branch_2/Conv2d_0c_3x3"},  // 3x3
      {"Mixed_5b.branch_pool", "Mixed_5b/Branch_3/Conv2d_0b_1x1"},     // 1x1 after AvgPool_0a_3x3

      // Mixed_5c: slim's odd Branch_1 names.
      {"Mixed_5c.branch1x1", "Mixed_5c/Branch_0/Conv2d_0a_1x1"},
      {"Mixed_5c.branch5x5_1", "Mixed_5c/Branch_1/Conv2d_0b_1x1"},  // 1x1 (sic)
      {"Mixed_5c.branch5x5_2", "Mixed_5c/Branch_1/Conv_1_0c_5x5"},  // 5x5 (sic)
      {"Mixed_5c.branch3x3dbl_1", "Mixed_5c/Branch_2/Conv2d_0a_1x1"},
      {"Mixed_5c.branch3x3dbl_2", "Mixed_5c/Branch_2/Conv2d_0b_3x3"},
      {"Mixed_5c.branch3x3dbl_3", "Mixed_5c/Branch_2/Conv2d_0c_3x3"},
      {"Mixed_5c.branch_pool", "Mixed_5c/Branch_3/Conv2d_0b_1x1"},

      {"Mixed_5d.branch1x1", "Mixed_5d/Branch_0/Conv2d_0a_1x1"},
      {"Mixed_5d.branch5x5_1", "Mixed_5d/Branch_1/Conv2d_0a_1x1"},
      {"Mixed_5d.branch5x5_2", "Mixed_5d/Branch_1/Conv2d_0b_5x5"},
      {"Mixed_5d.branch3x3dbl_1", "Mixed_5d/Branch_2/Conv2d_0a_1x1"},
      {"Mixed_5d.branch3x3dbl_2", "Mixed_5d/Branch_2/Conv2d_0b_3x3"},
      {"Mixed_5d.branch3x3dbl_3", "Mixed_5d/Branch_2/Conv2d_0c_3x3"},
      {"Mixed_5d.branch_pool", "Mixed_5d/Branch_3/Conv2d_0b_1x1"},

      // InceptionB (35x35 -> 17x17); Branch_2 is the (stateless) max-pool. The stride-2 3x3s
      // are named "1x1" in slim.
      {"Mixed_6a.branch3x3", "Mixed_6a/Branch_0/Conv2d_1a_1x1"},       // 3x3/2 valid (sic)
      {"Mixed_6a.branch3x3dbl_1", "Mixed_6a/Branch_1/Conv2d_0a_1x1"},  // 1x1
      {"Mixed_6a.branch3x3dbl_2", "Mixed_6a/Branch_1/Conv2d_0b_3x3"},  // 3x3 same
      {"Mixed_6a.branch3x3dbl_3", "Mixed_6a/Branch_1/Conv2d_1a_1x1"},  // 3x3/2 valid (sic)

      // InceptionC (17x17): Branch_1 1x1 -> 1x7 -> 7x1, Branch_2 1x1 -> 7x1 -> 1x7 -> 7x1 -> 1x7.
      {"Mixed_6b.branch1x1", "Mixed_6b/Branch_0/Conv2d_0a_1x1"},
      {"Mixed_6b.branch7x7_1", "Mixed_6b/Branch_1/Conv2d_0a_1x1"},     // 1x1
      {"Mixed_6b.branch7x7_2", "Mixed_6b/Branch_1/Conv2d_0b_1x7"},     // 1x7
      {"Mixed_6b.branch7x7_3", "Mixed_6b/Branch_1/Conv2d_0c_7x1"},     // 7x1
      {"Mixed_6b.branch7x7dbl_1", "Mixed_6b/Branch_2/Conv2d_0a_1x1"},  // 1x1
      {"Mixed_6b.branch7x7dbl_2", "Mixed_6b/Branch_2/Conv2d_0b_7x1"},  // 7x1
      {"Mixed_6b.branch7x7dbl_3", "Mixed_6b/Branch_2/Conv2d_0c_1x7"},  // 1x7
      {"Mixed_6b.branch7x7dbl_4", "Mixed_6b/Branch_2/Conv2d_0d_7x1"},  // 7x1
      {"Mixed_6b.branch7x7dbl_5", "Mixed_6b/Branch_2/Conv2d_0e_1x7"},  // 1x7
      {"Mixed_6b.branch_pool", "Mixed_6b/Branch_3/Conv2d_0b_1x1"},     // 1x1 after AvgPool_0a_3x3

      {"Mixed_6c.branch1x1", "Mixed_6c/Branch_0/Conv2d_0a_1x1"},
      {"Mixed_6c.branch7x7_1", "Mixed_6c/Branch_1/Conv2d_0a_1x1"},
      {"Mixed_6c.branch7x7_2", "Mixed_6c/Branch_1/Conv2d_0b_1x7"},
      {"Mixed_6c.branch7x7_3", "Mixed_6c/Branch_1/Conv2d_0c_7x1"},
      {"Mixed_6c.branch7x7dbl_1", "Mixed_6c/Branch_2/Conv2d_0a_1x1"},
      {"Mixed_6c.branch7x7dbl_2", "Mixed_6c/Branch_2/Conv2d_0b_7x1"},
      {"Mixed_6c.branch7x7dbl_3", "Mixed_6c/Branch_2/Conv2d_0c_1x7"},
      {"Mixed_6c.branch7x7dbl_4", "Mixed_6c/Branch_2/Conv2d_0d_7x1"},
      {"Mixed_6c.branch7x7dbl_5", "Mixed_6c/Branch_2/Conv2d_0e_1x7"},
      {"Mixed_6c.branch_pool", "Mixed_6c/Branch_3/Conv2d_0b_1x1"},

      {"Mixed_6d.branch1x1", "Mixed_6d/Branch_0/Conv2d_0a_1x1"},
      {"Mixed_6d.branch7x7_1", "Mixed_6d/Branch_1/Conv2d_0a_1x1"},
      {"Mixed_6d.branch7x7_2", "Mixed_6d/Branch_1/Conv2d_0b_1x7"},
      {"Mixed_6d.branch7x7_3", "Mixed_6d/Branch_1/Conv2d_0c_7x1"},
      {"Mixed_6d.branch7x7dbl_1", "Mixed_6d/Branch_2/Conv2d_0a_1x1"},
      {"Mixed_6d.branch7x7dbl_2", "Mixed_6d/Branch_2/Conv2d_0b_7x1"},
      {"Mixed_6d.branch7x7dbl_3", "Mixed_6d/Branch_2/Conv2d_0c_1x7"},
      {"Mixed_6d.branch7x7dbl_4", "Mixed_6d/Branch_2/Conv2d_0d_7x1"},
      {"Mixed_6d.branch7x7dbl_5", "Mixed_6d/Branch_2/Conv2d_0e_1x7"},
      {"Mixed_6d.branch_pool", "Mixed_6d/Branch_3/Conv2d_0b_1x1"},

      {"Mixed_6e.branch1x1", "Mixed_6e/Branch_0/Conv2d_0a_1x1"},
      {"Mixed_6e.branch7x7_1", "Mixed_6e/Branch_1/Conv2d_0a_1x1"},
      {"Mixed_6e.branch7x7_2", "Mixed_6e/Branch_1/Conv2d_0b_1x7"},
      {"Mixed_6e.branch7x7_3", "Mixed_6e/Branch_1/Conv2d_0c_7x1"},
      {"Mixed_6e.branch7x7dbl_1", "Mixed_6e/Branch_2/Conv2d_0a_1x1"},
      {"Mixed_6e.branch7x7dbl_2", "Mixed_6e/Branch_2/Conv2d_0b_7x1"},
      {"Mixed_6e.branch7x7dbl_3", "Mixed_6e/Branch_2/Conv2d_0c_1x7"},
      {"Mixed_6e.branch7x7dbl_4", "Mixed_6e/Branch_2/Conv2d_0d_7x1"},
      {"Mixed_6e.branch7x7dbl_5", "Mixed_6e/Branch_2/Conv2d_0e_1x7"},
      {"Mixed_6e.branch_pool", "Mixed_6e/Branch_3/Conv2d_0b_1x1"},

      // Auxiliary classifier on Mixed_6e (AvgPool_1a_5x5 /3 valid first).
      {"AuxLogits.conv0", "AuxLogits/Conv2d_1b_1x1"},  // 1x1, 128
      {"AuxLogits.conv1", "AuxLogits/Conv2d_2a_5x5"},  // 5x5 valid, 768

      // InceptionD (17x17 -> 8x8); Branch_2 is the max-pool.
      {"Mixed_7a.branch3x3_1", "Mixed_7a/Branch_0/Conv2d_0a_1x1"},    // 1x1
      {"Mixed_7a.branch3x3_2", "Mixed_7a/Branch_0/Conv2d_1a_3x3"},    // 3x3/2 valid
      {"Mixed_7a.branch7x7x3_1", "Mixed_7a/Branch_1/Conv2d_0a_1x1"},  // 1x1
      {"Mixed_7a.branch7x7x3_2", "Mixed_7a/Branch_1/Conv2d_0b_1x7"},  // 1x7
      {"Mixed_7a.branch7x7x3_3", "Mixed_7a/Branch_1/Conv2d_0c_7x1"},  // 7x1
      {"Mixed_7a.branch7x7x3_4", "Mixed_7a/Branch_1/Conv2d_1a_3x3"},  // 3x3/2 valid

      // InceptionE (8x8). Mixed_7b's Branch_1 3x1 is Conv2d_0b_3x1, Mixed_7c's Conv2d_0c_3x1.
      {"Mixed_7b.branch1x1", "Mixed_7b/Branch_0/Conv2d_0a_1x1"},        // 1x1
      {"Mixed_7b.branch3x3_1", "Mixed_7b/Branch_1/Conv2d_0a_1x1"},      // 1x1
      {"Mixed_7b.branch3x3_2a", "Mixed_7b/Branch_1/Conv2d_0b_1x3"},     // 1x3
      {"Mixed_7b.branch3x3_2b", "Mixed_7b/Branch_1/Conv2d_0b_3x1"},     // 3x1 (sic: 0b)
      {"Mixed_7b.branch3x3dbl_1", "Mixed_7b/Branch_2/Conv2d_0a_1x1"},   // 1x1
      {"Mixed_7b.branch3x3dbl_2", "Mixed_7b/Branch_2/Conv2d_0b_3x3"},   // 3x3
      {"Mixed_7b.branch3x3dbl_3a", "Mixed_7b/Branch_2/Conv2d_0c_1x3"},  // 1x3
      {"Mixed_7b.branch3x3dbl_3b", "Mixed_7b/Branch_2/Conv2d_0d_3x1"},  // 3x1
      {"Mixed_7b.branch_pool", "Mixed_7b/Branch_3/Conv2d_0b_1x1"},      // 1x1 after AvgPool_0a_3x3

      {"Mixed_7c.branch1x1", "Mixed_7c/Branch_0/Conv2d_0a_1x1"},
      {"Mixed_7c.branch3x3_1", "Mixed_7c/Branch_1/Conv2d_0a_1x1"},
      {"Mixed_7c.branch3x3_2a", "Mixed_7c/Branch_1/Conv2d_0b_1x3"},
      {"Mixed_7c.branch3x3_2b", "Mixed_7c/Branch_1/Conv2d_0c_3x1"},  // 3x1 (0c here)
      {"Mixed_7c.branch3x3dbl_1", "Mixed_7c/Branch_2/Conv2d_0a_1x1"},
      {"Mixed_7c.branch3x3dbl_2", "Mixed_7c/Branch_2/Conv2d_0b_3x3"},
      {"Mixed_7c.branch3x3dbl_3a", "Mixed_7c/Branch_2/Conv2d_0c_1x3"},
      {"Mixed_7c.branch3x3dbl_3b", "Mixed_7c/Branch_2/Conv2d_0d_3x1"},
      {"Mixed_7c.branch_pool", "Mixed_7c/Branch_3/Conv2d_0b_1x1"},
  };
  return table;
}

// The classifiers: torch Linear <-> TF-Slim 1x1 convolution with biases.
const std::map<std::string, std::string>& linear_scopes() {
  static const std::map<std::string, std::string> table = {
      {"fc", "Logits/Conv2d_1c_1x1"},               // 2048 -> classes (1001 in the checkpoint)
      {"AuxLogits.fc", "AuxLogits/Conv2d_2b_1x1"},  // 768 -> classes (1001 in the checkpoint)
  };
  return table;
}

[[noreturn]] void unknown(const std::string& orchard_name) {
  throw std::invalid_argument("inception_v3_tf_name: no TF-Slim name for Inception-v3 variable '" + orchard_name + "'");
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

// TF-Slim's name (with the "InceptionV3/" scope) of an Orchard Inception-v3 variable; nullopt
// only for what TF-Slim has no variable for (batch norm's num_batches_tracked); throws
// std::invalid_argument for any name it does not know.
std::optional<TfName> inception_v3_tf_name(const std::string& orchard_name) {
  const auto dot = orchard_name.rfind('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == orchard_name.size()) unknown(orchard_name);
  const std::string module = orchard_name.substr(0, dot);  // e.g. "Mixed_5b.branch1x1.bn"
  const std::string field = orchard_name.substr(dot + 1);  // e.g. "running_mean"

  // Classifiers: fc.{weight,bias}, AuxLogits.fc.{weight,bias}.
  if (auto it = linear_scopes().find(module); it != linear_scopes().end()) {
    const std::string scope = kScope + it->second;
    if (field == "weight") return TfName{scope + "/weights", TfLayout::kConvDense, std::nullopt};
    if (field == "bias") return TfName{scope + "/biases", TfLayout::kSame, std::nullopt};
    unknown(orchard_name);
  }

  // BasicConv2d: <prefix>.conv.weight (no bias), <prefix>.bn.<field>.
  if (ends_with(module, ".conv")) {
    const auto it = conv_scopes().find(module.substr(0, module.size() - 5));
    if (it == conv_scopes().end() || field != "weight") unknown(orchard_name);
    return TfName{kScope + it->second + "/weights", TfLayout::kConv, std::nullopt};
  }
  if (ends_with(module, ".bn")) {
    const auto it = conv_scopes().find(module.substr(0, module.size() - 3));
    if (it == conv_scopes().end()) unknown(orchard_name);
    if (field != "weight" && field != "bias" && field != "running_mean" && field != "running_var" &&
        field != "num_batches_tracked")
      unknown(orchard_name);
    // inception_v3_arg_scope's batch norm: scale=False (no gamma in the checkpoint: 1).
    return tf_batch_norm_name(kScope + it->second, field, /*scale=*/false);
  }
  unknown(orchard_name);
}

}  // namespace orchard::models
