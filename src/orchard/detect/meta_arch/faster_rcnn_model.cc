#include "orchard/detect/meta_arch/faster_rcnn_model.h"

#include <torch/nn/functional.h>
#include <torch/nn/init.h>
#include <torch/torch.h>

#include <cmath>
#include <stdexcept>

#include "orchard/detect/feature_extractors/registry.h"
#include "orchard/detect/ops/crop_and_resize.h"
#include "orchard/layers/init.h"

namespace orchard::detect {
namespace {

namespace F = torch::nn::functional;

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

int64_t mask_conv_depth(int64_t feature_channels, int64_t num_classes) {
  // Python 3's round (half to even), as the OD API runs it.
  const double log_depth = std::nearbyint(
      (2.0 * std::log2(static_cast<double>(feature_channels)) + 3.0 * std::log2(static_cast<double>(num_classes))) /
      5.0);
  return static_cast<int64_t>(std::llround(std::pow(2.0, log_depth)));
}

FasterRcnnModelImpl::FasterRcnnModelImpl(const FasterRcnnModelOptions& o) : options_(o) {
  const auto& entry = feature_extractors::registry().faster_rcnn(o.feature_extractor);
  TORCH_CHECK(o.features_stride == 8 || o.features_stride == 16, "first_stage_features_stride must be 8 or 16");
  feature_extractors::FasterRcnnFeatureExtractorOptions eo;
  eo.type = o.feature_extractor;
  eo.features_stride = o.features_stride;
  eo.initialize = o.initialize;
  extractor_ = entry.make(eo);
  const int64_t features = extractor_->first_stage_channels(), box_features = extractor_->second_stage_channels();
  first_stage_extractor_ = register_module("first_stage_extractor", extractor_->build_first_stage());
  if (!extractor_->second_stage_after_rpn())
    second_stage_extractor_ = register_module("second_stage_extractor", extractor_->build_second_stage());
  const int64_t rate = o.rpn_atrous_rate, k = o.rpn_kernel_size;
  rpn_conv_ = register_module(
      "rpn_conv",
      torch::nn::Conv2d(torch::nn::Conv2dOptions(features, o.rpn_depth, k).padding(rate * (k - 1) / 2).dilation(rate)));
  const int64_t a = o.anchors_per_location;
  rpn_box_ = register_module("rpn_box_encoding", torch::nn::Conv2d(torch::nn::Conv2dOptions(o.rpn_depth, a * 4, 1)));
  rpn_class_ = register_module("rpn_class", torch::nn::Conv2d(torch::nn::Conv2dOptions(o.rpn_depth, a * 2, 1)));
  if (extractor_->second_stage_after_rpn())
    second_stage_extractor_ = register_module("second_stage_extractor", extractor_->build_second_stage());
  if (o.rfcn) {
    TORCH_CHECK(extractor_->implements_rfcn(), "R-FCN is implemented with the ResNet-v1 extractors");
    const int64_t bins = o.rfcn_bins_height * o.rfcn_bins_width;
    reduce_depth_ =
        register_module("reduce_depth", torch::nn::Conv2d(torch::nn::Conv2dOptions(box_features, o.rfcn_depth, 1)));
    refined_locations_ = register_module(
        "refined_locations", torch::nn::Conv2d(torch::nn::Conv2dOptions(o.rfcn_depth, bins * o.num_classes * 4, 1)));
    class_predictions_ = register_module(
        "class_predictions", torch::nn::Conv2d(torch::nn::Conv2dOptions(o.rfcn_depth, bins * (o.num_classes + 1), 1)));
  } else {
    box_encoding_ = register_module("box_encoding", torch::nn::Linear(box_features, o.num_classes * 4));
    class_logits_ = register_module("class_logits", torch::nn::Linear(box_features, o.num_classes + 1));
  }
  if (o.predict_instance_masks) {
    TORCH_CHECK(o.mask_height > 0 && o.mask_width > 0 && o.mask_num_conv_layers >= 1,
                "mask_height, mask_width and mask_prediction_num_conv_layers must be positive");
    const int64_t mask_depth = o.mask_conv_depth > 0 ? o.mask_conv_depth : mask_conv_depth(box_features, o.num_classes);
    const int64_t hidden = o.mask_num_conv_layers - 1 + (o.convolve_then_upsample ? 1 : 0);
    mask_convs_ = register_module("mask_convs", torch::nn::ModuleList());
    int64_t channels = box_features;
    for (int64_t i = 0; i < hidden; ++i) {
      mask_convs_->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(channels, mask_depth, 3).padding(1)));
      channels = mask_depth;
    }
    const int64_t masks = o.masks_are_class_agnostic ? 1 : o.num_classes;
    mask_convs_->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(channels, masks, 3).padding(1)));
  }
  if (!o.initialize) return;
  torch::NoGradGuard no_grad;
  // first_stage_box_predictor_conv_hyperparams (truncated normal) for the RPN's three
  // convolutions; the box predictor's fc_hyperparams of the samples: variance scaling 1.0,
  // FAN_AVG, uniform (Glorot uniform). Biases 0.
  for (auto* conv : {&rpn_conv_, &rpn_box_, &rpn_class_}) {
    layers::truncated_normal_((*conv)->weight, o.rpn_init_stddev);
    (*conv)->bias.zero_();
  }
  for (auto* fc : {&box_encoding_, &class_logits_}) {
    if (!*fc) continue;
    torch::nn::init::xavier_uniform_((*fc)->weight);
    (*fc)->bias.zero_();
  }
  for (auto* conv : {&reduce_depth_, &refined_locations_, &class_predictions_}) {
    if (!*conv) continue;
    layers::truncated_normal_((*conv)->weight, o.rfcn_init_stddev);
    (*conv)->bias.zero_();
  }
  if (mask_convs_)
    for (auto& p : mask_convs_->named_parameters()) {
      auto value = p.value();
      if (p.key().find("weight") != std::string::npos) layers::truncated_normal_(value, o.mask_init_stddev);
      else value.zero_();
    }
}

std::pair<int64_t, int64_t> FasterRcnnModelImpl::feature_map_size(int64_t height, int64_t width) const {
  // conv1 (7x7/2, padding 3), pool1 (3x3/2 SAME) and each strided unit (3x3/2, padding 1) all
  // give ceil(n / 2); Inception-v2's 'SAME' stride-2 layers too: ceil(n / stride).
  return extractor_->feature_map_size(height, width);
}

FasterRcnnModelImpl::FirstStage FasterRcnnModelImpl::first_stage(const torch::Tensor& images) {
  TORCH_CHECK(images.dim() == 4 && images.size(1) == 3, "Faster R-CNN expects images [B, 3, H, W], got ",
              images.sizes());
  TORCH_CHECK(images.size(2) >= 33 && images.size(3) >= 33,
              "Faster R-CNN's ResNet needs inputs of at least 33x33, got ", images.size(2), "x", images.size(3));
  FirstStage out;
  out.features = extractor_->first_stage_features(images).tensor;
  const auto h = torch::clamp(rpn_conv_(out.features), 0, 6);  // ReLU6
  const int64_t b = h.size(0);
  out.box_encodings = rpn_box_(h).permute({0, 2, 3, 1}).reshape({b, -1, 4});
  out.objectness = rpn_class_(h).permute({0, 2, 3, 1}).reshape({b, -1, 2});
  return out;
}

std::pair<torch::Tensor, torch::Tensor> FasterRcnnModelImpl::second_stage(const torch::Tensor& features,
                                                                          const torch::Tensor& boxes,
                                                                          const torch::Tensor& box_indices) {
  if (!options_.rfcn) return box_predictor(box_classifier_features(features, boxes, box_indices));
  // RFCNMetaArch: block4 (stride 1) on the whole map, RfcnBoxPredictor's reduce_depth (ReLU, the
  // conv_hyperparams' activation), then the position-sensitive score maps cropped per proposal.
  const auto x = torch::relu(reduce_depth_(extractor_->second_stage_features(features)));
  const auto& o = options_;
  const auto locations = position_sensitive_crop_regions(refined_locations_(x), boxes, box_indices, o.rfcn_crop_height,
                                                         o.rfcn_crop_width, o.rfcn_bins_height, o.rfcn_bins_width);
  const auto classes = position_sensitive_crop_regions(class_predictions_(x), boxes, box_indices, o.rfcn_crop_height,
                                                       o.rfcn_crop_width, o.rfcn_bins_height, o.rfcn_bins_width);
  return {locations.view({boxes.size(0), o.num_classes, 4}), classes};
}

torch::Tensor FasterRcnnModelImpl::box_classifier_features(const torch::Tensor& features, const torch::Tensor& boxes,
                                                           const torch::Tensor& box_indices) {
  const int64_t c = options_.initial_crop_size;
  auto x = crop_and_resize(features, boxes, box_indices, c, c);
  if (options_.maxpool_kernel_size > 1 || options_.maxpool_stride > 1)
    x = F::max_pool2d(x, F::MaxPool2dFuncOptions(options_.maxpool_kernel_size).stride(options_.maxpool_stride));
  return extractor_->second_stage_features(x);
}

std::pair<torch::Tensor, torch::Tensor> FasterRcnnModelImpl::box_predictor(const torch::Tensor& box_features) {
  auto x = box_features.mean({2, 3});  // MaskRCNNBoxPredictor's AvgPool
  if (options_.use_dropout)
    x = F::dropout(x, F::DropoutFuncOptions().p(1 - options_.dropout_keep_probability).training(is_training()));
  return {box_encoding_(x).view({x.size(0), options_.num_classes, 4}), class_logits_(x)};
}

namespace {

torch::Tensor resize_align_corners(const torch::Tensor& x, int64_t height, int64_t width) {
  return F::interpolate(
      x,
      F::InterpolateFuncOptions().size(std::vector<int64_t>{height, width}).mode(torch::kBilinear).align_corners(true));
}

// conv(resize(x)) for a stride-1 convolution padded k / 2 (the mask head's 3x3 'SAME'). The
// bilinear resize is linear and treats every channel alike, so it commutes with the convolution's
// channel mixing: each kernel tap's channel mix runs on the small map, the taps' maps are resized
// and added at their offsets (zero outside, as the padding). The same values as resizing first,
// up to float rounding, at (h w) / (height width) of the multiply-adds: 1/22 for 7x7 -> 33x33,
// where the first mask convolution (2048 -> 256 channels) was most of Mask R-CNN's cost.
torch::Tensor conv_of_resized(torch::nn::Conv2dImpl& conv, const torch::Tensor& x, int64_t height, int64_t width) {
  const auto& w = conv.weight;  // [O, C, kh, kw]
  const int64_t out = w.size(0), kh = w.size(2), kw = w.size(3), n = x.size(0);
  auto taps = F::conv2d(x, w.permute({0, 2, 3, 1}).reshape({out * kh * kw, w.size(1), 1, 1}));
  taps = F::pad(resize_align_corners(taps, height, width), F::PadFuncOptions({kw / 2, kw / 2, kh / 2, kh / 2}))
             .view({n, out, kh, kw, height + 2 * (kh / 2), width + 2 * (kw / 2)});
  auto y = conv.bias.defined() ? conv.bias.view({1, out, 1, 1}).expand({n, out, height, width}) : torch::Tensor();
  for (int64_t i = 0; i < kh; ++i)
    for (int64_t j = 0; j < kw; ++j) {
      const auto tap = taps.select(2, i).select(2, j).narrow(2, i, height).narrow(3, j, width);
      y = y.defined() ? y + tap : tap;
    }
  return y;
}

}  // namespace

torch::Tensor FasterRcnnModelImpl::mask_predictor(const torch::Tensor& box_features) {
  TORCH_CHECK(mask_convs_, "this Faster R-CNN has no mask head (predict_instance_masks is false)");
  const int64_t mh = options_.mask_height, mw = options_.mask_width;
  auto x = box_features;
  const auto n = static_cast<int64_t>(mask_convs_->size());
  auto conv = [&](int64_t i) { return mask_convs_[static_cast<size_t>(i)]->as<torch::nn::Conv2d>(); };
  int64_t first = 0;
  if (!options_.convolve_then_upsample) {
    // The resize to the mask size, then the first convolution (hidden, or the last when it is the
    // only one): on the small map when the resize enlarges it (the samples' 7x7 -> 33x33).
    if (x.size(2) * x.size(3) < mh * mw) {
      x = conv_of_resized(*conv(0), x, mh, mw);
    } else {
      x = conv(0)->forward(resize_align_corners(x, mh, mw));
    }
    if (n == 1) return x;
    x = torch::relu(x);
    first = 1;
  }
  for (int64_t i = first; i < n - 1; ++i) {
    if (options_.convolve_then_upsample && i == n - 2) {  // before the last hidden convolution
      const int64_t sy = mh / x.size(2), sx = mw / x.size(3);
      x = x.repeat_interleave(sy, 2).repeat_interleave(sx, 3);
    }
    x = torch::relu(conv(i)->forward(x));
  }
  return conv(n - 1)->forward(x);
}

void FasterRcnnModelImpl::train(bool on) {
  torch::nn::Module::train(on);
  if (!on || options_.batch_norm_trainable) return;
  for (auto& m : modules(/*include_self=*/false))
    if (auto* bn = m->as<torch::nn::BatchNorm2d>()) bn->eval();
}

bool FasterRcnnModelImpl::is_prediction_head_parameter(const std::string& name) const {
  if (starts_with(name, "box_encoding.") || starts_with(name, "class_logits.") ||
      starts_with(name, "refined_locations.") || starts_with(name, "class_predictions."))
    return true;
  // The mask predictor's last convolution has a channel per class.
  return mask_convs_ && name.rfind("mask_convs." + std::to_string(mask_convs_->size() - 1) + ".", 0) == 0;
}

std::optional<models::TfName> FasterRcnnModelImpl::tf_name(const std::string& name, bool classification) const {
  using models::TfLayout;
  using models::TfName;
  const std::string first = "first_stage_extractor.", second = "second_stage_extractor.";
  if (starts_with(name, first) || starts_with(name, second)) {
    const bool first_stage = starts_with(name, first);
    const auto n = extractor_->tf_name(name.substr((first_stage ? first : second).size()), first_stage, classification);
    if (!n || classification) return n;
    return TfName{(first_stage ? "FirstStageFeatureExtractor/" : "SecondStageFeatureExtractor/") + n->name, n->layout,
                  n->default_value, n->depthwise_multiplier};
  }
  if (classification) return std::nullopt;  // the detection layers are not in an ImageNet checkpoint
  const auto dot = name.rfind('.');
  if (dot == std::string::npos) throw std::invalid_argument("Faster R-CNN has no variable " + name);
  const std::string module = name.substr(0, dot), field = name.substr(dot + 1);
  std::string scope;
  if (module == "rpn_conv") scope = "Conv";
  else if (module == "rpn_box_encoding") scope = "FirstStageBoxPredictor/BoxEncodingPredictor";
  else if (module == "rpn_class") scope = "FirstStageBoxPredictor/ClassPredictor";
  else if (module == "box_encoding") scope = "SecondStageBoxPredictor/BoxEncodingPredictor";
  else if (module == "class_logits") scope = "SecondStageBoxPredictor/ClassPredictor";
  else if (module == "reduce_depth" || module == "refined_locations" || module == "class_predictions")
    scope = "SecondStageBoxPredictor/" + module;
  else if (starts_with(module, "mask_convs.")) {  // slim.conv2d's default scopes, in order
    const std::string index = module.substr(std::string("mask_convs.").size());
    scope = "SecondStageBoxPredictor/Conv" + (index == "0" ? std::string() : "_" + index);
  } else throw std::invalid_argument("Faster R-CNN has no variable " + name);
  const bool fc = module == "box_encoding" || module == "class_logits";
  if (field == "weight") return TfName{scope + "/weights", fc ? TfLayout::kDense : TfLayout::kConv};
  if (field == "bias") return TfName{scope + "/biases"};
  throw std::invalid_argument("Faster R-CNN has no variable " + name);
}

}  // namespace orchard::detect
