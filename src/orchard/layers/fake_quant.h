// Quantization-aware training as the OD API's graph_rewriter { quantization { ... } } asks for it
// (TF's contrib.quantize rewriter): weights and activations pass through TensorFlow's
// FakeQuantWithMinMaxVars (a nudged uint8 grid, straight-through gradient inside the range),
// weights with the range of their own values (LastValueQuantize, narrow range), activations with
// moving averages of each batch's range (MovingAvgQuantize, zero-debiased EMA, decay 0.999);
// quantizing from training step `delay` on, and always in evaluation. A batch norm is folded into
// the convolution before it, and the folded weights are what is quantized (as TFLite runs them).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace orchard::layers {

// graph_rewriter.quantization.
struct QuantizationOptions {
  int64_t delay = 500000;  // training steps in float first
  int64_t weight_bits = 8, activation_bits = 8;
  bool symmetric = false;  // ranges symmetric about zero
};

// Shared by a model's quantizers: whether training quantizes yet (the task sets it each step).
struct QuantizationControl {
  QuantizationOptions options;
  bool active = false;
};

// TensorFlow's nudged range (fake_quant_ops_functor.h's Nudge): the grid of 2^bits values
// (narrow_range: one fewer, from 1) shifted so that zero is one of them.
struct QuantRange {
  float min = 0, max = 0, scale = 0;
  int64_t zero_point = 0, quant_min = 0, quant_max = 255;
};
QuantRange nudge_range(float min, float max, int64_t bits, bool narrow_range);

// FakeQuantWithMinMaxVars: clamp to the nudged range, snap to its grid (floor(v + 0.5)); the
// gradient passes unchanged where nudged min <= x <= nudged max, and is zero outside.
at::Tensor fake_quantize(const at::Tensor& x, const QuantRange& range);

// One tensor's quantizer: TF's "<scope>/weights_quant" or "<scope>/act_quant" variables min and
// max (activations also min_biased, max_biased, min_local_step, max_local_step: the zero-debiased
// moving averages' state, TF's min/biased, min/local_step, ...).
class FakeQuantImpl : public torch::nn::Module {
 public:
  FakeQuantImpl(std::shared_ptr<QuantizationControl> control, bool weights);
  at::Tensor forward(const at::Tensor& x);
  // The nudged range of the stored min and max.
  QuantRange range() const;
  bool weights() const { return weights_; }

  torch::Tensor min, max, min_biased, max_biased, min_local_step, max_local_step;

 private:
  std::shared_ptr<QuantizationControl> control_;
  bool weights_;
};
TORCH_MODULE(FakeQuant);

// Whether a model variable is a quantizer's state ("...weights_quant.min", "...act_quant.max_biased",
// "quantization_step"): fine-tuning starts it afresh, as the OD API's quantized configs start
// from float checkpoints that have none.
bool is_quantization_state(const std::string& name);

// A quantizer variable's parts: "<layer>.<kind>.<field>", kind weights_quant, act_quant or
// add_quant, field min, max, min_biased, ...; tf_field TensorFlow's ("min", "min/biased",
// "min/local_step", ...). Unset for any other name.
struct QuantizerVariable {
  std::string layer, kind, tf_field;
};
std::optional<QuantizerVariable> parse_quantizer_variable(const std::string& name);

// One convolution's quantizers: a module with the children "weights_quant" and "act_quant".
std::shared_ptr<torch::nn::Module> conv_quantizers(const std::shared_ptr<QuantizationControl>& control);
// A child quantizer ("weights_quant", "act_quant", ...) of `owner`.
FakeQuantImpl& quantizer(torch::nn::Module& owner, const std::string& name);

// A layer that knows where its quantizers go (ConvNormActivation, MobileNetV2's inverted
// residual, ...): enable_quantization registers them.
class Quantizable {
 public:
  virtual ~Quantizable() = default;
  virtual void enable_quantization(const std::shared_ptr<QuantizationControl>& control) = 0;
};

// Every Quantizable layer of `model` quantized; an Error-free no-op on models without any.
// Returns how many layers were.
int64_t enable_quantization(torch::nn::Module& model, const std::shared_ptr<QuantizationControl>& control);

// conv (no bias) then bn, with the batch norm folded into the quantized weights (PyTorch's
// ConvBn QAT): conv(x, q(W * s)) / s then bn, s = gamma / sqrt(running_var + eps). In evaluation
// this is conv(x, q(W * s)) + beta - mean * s, the folded layer TFLite runs.
at::Tensor quantized_conv_bn(torch::nn::Conv2dImpl& conv, torch::nn::BatchNorm2dImpl& bn, FakeQuantImpl& weights,
                             const at::Tensor& x, bool tf_same_padding);

// A biased convolution with quantized weights (the box predictor's heads).
at::Tensor quantized_conv(torch::nn::Conv2dImpl& conv, FakeQuantImpl& weights, const at::Tensor& x,
                          bool tf_same_padding);

}  // namespace orchard::layers
