#include "orchard/detect/feature_extractors/fpn.h"

#include <torch/nn/functional.h>
#include <torch/nn/modules/conv.h>

#include <cstdio>
#include <stdexcept>

#include "orchard/layers/conv_norm_activation.h"
#include "orchard/layers/tf_same.h"

namespace orchard::detect {

SeparableConvImpl::SeparableConvImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride, double bn_momentum,
                                     double bn_eps, bool same)
    : tf_same(same) {
  depthwise = register_module("0", torch::nn::Conv2d(torch::nn::Conv2dOptions(in, in, kernel)
                                                         .stride(stride)
                                                         .groups(in)
                                                         .padding(same ? 0 : (kernel - 1) / 2)
                                                         .bias(false)));
  pointwise =
      register_module("1", layers::ConvNormActivation(
                               layers::ConvNormActivationOptions(in, out, 1).bn_momentum(bn_momentum).bn_eps(bn_eps)));
}

torch::Tensor SeparableConvImpl::forward(const torch::Tensor& x) {
  const auto d = weights_quant ? act_quant->forward(layers::quantized_conv(*depthwise, *weights_quant, x, tf_same))
                 : tf_same     ? layers::conv2d_tf_same(*depthwise, x)
                               : depthwise->forward(x);
  return pointwise->as<layers::ConvNormActivationImpl>()->forward(d);
}

void SeparableConvImpl::enable_quantization(const std::shared_ptr<layers::QuantizationControl>& control) {
  weights_quant = register_module("weights_quant", layers::FakeQuant(control, /*weights=*/true));
  act_quant = register_module("act_quant", layers::FakeQuant(control, /*weights=*/false));
}

std::optional<models::TfName> conv_layer_tf_name(const std::string& scope, const std::string& rest, bool separable) {
  if (const auto q = layers::parse_quantizer_variable(rest)) {
    if (q->layer.empty())
      return models::TfName{scope + (separable ? "/depthwise/" : "/") + q->kind + "/" + q->tf_field};
    if (separable && q->layer == ".1") return models::TfName{scope + "/" + q->kind + "/" + q->tf_field};
  }
  if (separable) {
    if (rest == ".0.weight") return models::TfName{scope + "/depthwise_weights", models::TfLayout::kDepthwise};
    if (rest == ".1.0.weight") return models::TfName{scope + "/pointwise_weights", models::TfLayout::kConv};
    if (rest.rfind(".1.1.", 0) == 0) return models::tf_batch_norm_name(scope, rest.substr(5));
  } else {
    if (rest == ".0.weight") return models::TfName{scope + "/weights", models::TfLayout::kConv};
    if (rest.rfind(".1.", 0) == 0) return models::tf_batch_norm_name(scope, rest.substr(3));
  }
  throw std::invalid_argument("not a variable of the layer " + scope + ": '" + rest + "'");
}

FpnTopDownImpl::FpnTopDownImpl(const FpnOptions& o) : options_(o) {
  TORCH_CHECK(!o.in_channels.empty() && o.depth >= 1, "FPN: need base feature maps and a positive depth");
  projection_ = register_module("projection", torch::nn::ModuleList());
  smoothing_ = register_module("smoothing", torch::nn::ModuleList());
  for (size_t k = 0; k < o.in_channels.size(); ++k) {
    projection_->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(o.in_channels[k], o.depth, 1)));
    if (k + 1 < o.in_channels.size()) {
      if (o.use_depthwise) smoothing_->push_back(SeparableConv(o.depth, o.depth, 3, 1, o.bn_momentum, o.bn_eps));
      else
        smoothing_->push_back(layers::ConvNormActivation(
            layers::ConvNormActivationOptions(o.depth, o.depth, 3).bn_momentum(o.bn_momentum).bn_eps(o.bn_eps)));
    }
  }
}

void FpnTopDownImpl::enable_quantization(const std::shared_ptr<layers::QuantizationControl>& control) {
  projection_quant_ = register_module("projection_quant", torch::nn::ModuleList());
  add_quant_ = register_module("top_down_quant", torch::nn::ModuleList());
  for (size_t k = 0; k < projection_->size(); ++k) {
    projection_quant_->push_back(layers::conv_quantizers(control));
    if (k + 1 < projection_->size()) {
      auto q = std::make_shared<torch::nn::Module>();
      q->register_module("add_quant", layers::FakeQuant(control, /*weights=*/false));
      add_quant_->push_back(q);
    }
  }
}

torch::Tensor FpnTopDownImpl::project(size_t k, const torch::Tensor& x) {
  auto& conv = *projection_[k]->as<torch::nn::Conv2d>();
  if (!projection_quant_) return conv.forward(x);
  auto& q = *projection_quant_[k];
  return layers::quantizer(q, "act_quant")
      .forward(layers::quantized_conv(conv, layers::quantizer(q, "weights_quant"), x, /*tf_same_padding=*/false));
}

std::vector<torch::Tensor> FpnTopDownImpl::forward(const std::vector<torch::Tensor>& base) {
  const size_t n = options_.in_channels.size();
  TORCH_CHECK(base.size() == n, "FPN: ", base.size(), " base feature maps for ", n);
  std::vector<torch::Tensor> out(n);
  auto top_down = project(n - 1, base[n - 1]);
  out[n - 1] = top_down;
  for (size_t k = n - 1; k-- > 0;) {
    // ops.nearest_neighbor_upsampling(scale=2): each value repeated 2x2.
    auto up = top_down.repeat_interleave(2, 2).repeat_interleave(2, 3);
    const auto residual = project(k, base[k]);
    TORCH_CHECK(up.size(2) >= residual.size(2) && up.size(3) >= residual.size(3), "FPN: level ", k, " is ",
                residual.size(2), "x", residual.size(3), ", more than twice the level above (", top_down.size(2), "x",
                top_down.size(3), ")");
    up = up.narrow(2, 0, residual.size(2)).narrow(3, 0, residual.size(3));
    top_down = up + residual;
    if (add_quant_) top_down = layers::quantizer(*add_quant_[k], "add_quant").forward(top_down);
    out[k] = options_.use_depthwise ? smoothing_[k]->as<SeparableConvImpl>()->forward(top_down)
                                    : smoothing_[k]->as<layers::ConvNormActivationImpl>()->forward(top_down);
  }
  return out;
}

std::optional<models::TfName> FpnTopDownImpl::tf_name(const std::string& name, const std::string& fpn_scope) const {
  const auto bad = [&] { return std::invalid_argument("not an FPN variable: '" + name + "'"); };
  char kind[32] = {0};
  int k = -1, consumed = 0;
  if (std::sscanf(name.c_str(), "%31[a-z_].%d%n", kind, &k, &consumed) != 2 || k < 0) throw bad();
  const std::string rest = name.substr(static_cast<size_t>(consumed));
  const std::string which = kind;
  if (which == "projection_quant" || which == "top_down_quant") {
    const auto q = layers::parse_quantizer_variable(name);
    if (!q) throw bad();
    return models::TfName{fpn_scope + (which == "top_down_quant" ? "/top_down_" : "/projection_") +
                          std::to_string(k + 1) + "/" + q->kind + "/" + q->tf_field};
  }
  if (which == "projection") {
    const std::string scope = fpn_scope + "/projection_" + std::to_string(k + 1);
    if (rest == ".weight") return models::TfName{scope + "/weights", models::TfLayout::kConv};
    if (rest == ".bias") return models::TfName{scope + "/biases"};
    throw bad();
  }
  if (which != "smoothing") throw bad();
  return conv_layer_tf_name(fpn_scope + "/smoothing_" + std::to_string(k + 1), rest, options_.use_depthwise);
}

}  // namespace orchard::detect
