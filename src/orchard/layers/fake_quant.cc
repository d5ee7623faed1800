#include "orchard/layers/fake_quant.h"

#include <torch/nn/functional/conv.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "orchard/layers/batch_norm.h"
#include "orchard/layers/tf_same.h"

namespace orchard::layers {

namespace F = torch::nn::functional;

// contrib.quantize's MovingAvgQuantize decay.
constexpr double kEmaDecay = 0.999;

QuantRange nudge_range(float min, float max, int64_t bits, bool narrow_range) {
  QuantRange r;
  r.quant_min = narrow_range ? 1 : 0;
  r.quant_max = (int64_t{1} << bits) - 1;
  if (!(max > min)) max = min + 1e-6f;  // an all-zero tensor: a tiny range around zero
  const float qmin = static_cast<float>(r.quant_min), qmax = static_cast<float>(r.quant_max);
  r.scale = (max - min) / (qmax - qmin);
  const float zero_point_from_min = qmin - min / r.scale;
  r.zero_point = zero_point_from_min < qmin   ? r.quant_min
                 : zero_point_from_min > qmax ? r.quant_max
                                              : static_cast<int64_t>(std::round(zero_point_from_min));
  r.min = (qmin - static_cast<float>(r.zero_point)) * r.scale;
  r.max = (qmax - static_cast<float>(r.zero_point)) * r.scale;
  return r;
}

torch::Tensor fake_quantize(const torch::Tensor& x, const QuantRange& r) {
  const auto clamped = x.clamp(r.min, r.max);  // its gradient: 1 inside [min, max], 0 outside
  const auto snapped = torch::floor((clamped - r.min) / r.scale + 0.5) * r.scale + r.min;
  return clamped + (snapped - clamped).detach();
}

FakeQuantImpl::FakeQuantImpl(std::shared_ptr<QuantizationControl> control, bool weights)
    : control_(std::move(control)), weights_(weights) {
  // TF's initial values (-6, 6); the moving averages replace them from the first batch on.
  min = register_buffer("min", torch::full({}, -6.0f));
  max = register_buffer("max", torch::full({}, 6.0f));
  if (!weights_) {
    min_biased = register_buffer("min_biased", torch::zeros({}));
    max_biased = register_buffer("max_biased", torch::zeros({}));
    min_local_step = register_buffer("min_local_step", torch::zeros({}));
    max_local_step = register_buffer("max_local_step", torch::zeros({}));
  }
}

torch::Tensor FakeQuantImpl::forward(const torch::Tensor& x) {
  const auto& o = control_->options;
  {
    torch::NoGradGuard no_grad;
    if (weights_ || is_training()) {
      // The range always holds zero; symmetric: [-m, m].
      const auto [lo, hi] = torch::aminmax(x.detach().to(torch::kFloat));
      auto batch_min = lo.clamp_max(0.0), batch_max = hi.clamp_min(0.0);
      if (o.symmetric) {
        batch_max = torch::maximum(-batch_min, batch_max);
        batch_min = -batch_max;
      }
      if (weights_) {  // LastValueQuantize
        min.copy_(batch_min);
        max.copy_(batch_max);
      } else {  // MovingAvgQuantize: assign_moving_average(..., zero_debias=True)
        for (auto [value, biased, step, var] : {std::tuple{batch_min, min_biased, min_local_step, min},
                                                std::tuple{batch_max, max_biased, max_local_step, max}}) {
          biased.sub_((biased - value.to(biased.device())) * (1.0 - kEmaDecay));
          step.add_(1.0);
          var.copy_(biased / (1.0 - torch::pow(torch::full({}, kEmaDecay, step.options()), step)));
        }
      }
    }
  }
  if (is_training() && !control_->active) return x;
  return fake_quantize(x, range());
}

QuantRange FakeQuantImpl::range() const {
  const auto& o = control_->options;
  return nudge_range(min.item<float>(), max.item<float>(), weights_ ? o.weight_bits : o.activation_bits, weights_);
}

namespace {

torch::Tensor conv_with(torch::nn::Conv2dImpl& conv, const torch::Tensor& x, const torch::Tensor& weight,
                        bool tf_same_padding) {
  if (tf_same_padding) return conv2d_tf_same(conv, x, weight);
  const auto& o = conv.options;
  const auto* padding = c10::get_if<torch::ExpandingArray<2>>(&o.padding());
  TORCH_CHECK(padding, "quantized convolution: string padding is not supported");
  return F::conv2d(x, weight,
                   F::Conv2dFuncOptions()
                       .bias(conv.bias)
                       .stride(o.stride())
                       .padding(*padding)
                       .dilation(o.dilation())
                       .groups(o.groups()));
}

}  // namespace

bool is_quantization_state(const std::string& name) {
  if (name == "quantization_step") return true;
  for (const char* kind : {"weights_quant.", "act_quant.", "add_quant."})
    if (name.find(kind) != std::string::npos) return true;
  return false;
}

std::optional<QuantizerVariable> parse_quantizer_variable(const std::string& name) {
  static const std::map<std::string, std::string> fields = {{"min", "min"},
                                                            {"max", "max"},
                                                            {"min_biased", "min/biased"},
                                                            {"max_biased", "max/biased"},
                                                            {"min_local_step", "min/local_step"},
                                                            {"max_local_step", "max/local_step"}};
  for (const std::string kind : {"weights_quant", "act_quant", "add_quant"}) {
    const std::string infix = "." + kind + ".";
    const size_t at = name.find(infix);
    if (at == std::string::npos) continue;
    auto field = fields.find(name.substr(at + infix.size()));
    if (field == fields.end()) return std::nullopt;
    return QuantizerVariable{name.substr(0, at), kind, field->second};
  }
  return std::nullopt;
}

std::shared_ptr<torch::nn::Module> conv_quantizers(const std::shared_ptr<QuantizationControl>& control) {
  auto q = std::make_shared<torch::nn::Module>();
  q->register_module("weights_quant", FakeQuant(control, /*weights=*/true));
  q->register_module("act_quant", FakeQuant(control, /*weights=*/false));
  return q;
}

FakeQuantImpl& quantizer(torch::nn::Module& owner, const std::string& name) {
  auto children = owner.named_children();
  auto* q = children.contains(name) ? children[name]->as<FakeQuantImpl>() : nullptr;
  TORCH_CHECK(q, "no quantizer ", name);
  return *q;
}

int64_t enable_quantization(torch::nn::Module& model, const std::shared_ptr<QuantizationControl>& control) {
  std::vector<Quantizable*> layers;
  for (const auto& m : model.modules(/*include_self=*/true))
    if (auto* q = dynamic_cast<Quantizable*>(m.get())) layers.push_back(q);
  for (auto* q : layers) q->enable_quantization(control);
  return static_cast<int64_t>(layers.size());
}

torch::Tensor quantized_conv_bn(torch::nn::Conv2dImpl& conv, torch::nn::BatchNorm2dImpl& bn, FakeQuantImpl& weights,
                                const torch::Tensor& x, bool tf_same_padding) {
  const auto s = bn.weight / torch::sqrt(bn.running_var + bn.options.eps());
  const auto folded = weights.forward(conv.weight * s.view({-1, 1, 1, 1}));
  return batch_norm(bn, conv_with(conv, x, folded, tf_same_padding) / s.view({1, -1, 1, 1}));
}

torch::Tensor quantized_conv(torch::nn::Conv2dImpl& conv, FakeQuantImpl& weights, const torch::Tensor& x,
                             bool tf_same_padding) {
  return conv_with(conv, x, weights.forward(conv.weight), tf_same_padding);
}

}  // namespace orchard::layers
