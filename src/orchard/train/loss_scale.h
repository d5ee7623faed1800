// Loss scaling for fp16 training (TF's LossScaleOptimizer, torch.cuda.amp.GradScaler): the
// loss is multiplied by a scale before backward so small fp16 gradients do not flush to
// zero; gradients are divided by it before the step. Dynamic scaling halves the scale and
// skips the step when a gradient is inf/NaN, and doubles it after `growth_interval` finite
// steps in a row. Master weights stay fp32 (autocast keeps parameters fp32).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace orchard::train {

class LossScaler {
 public:
  // `spec`: "dynamic" (initial scale 128, as the seed's default) or a fixed positive number.
  explicit LossScaler(const std::string& spec = "dynamic", int64_t growth_interval = 2000);

  double scale() const { return scale_; }
  bool dynamic() const { return dynamic_; }
  at::Tensor scale_loss(const at::Tensor& loss) const;
  // Divides the gradients by the scale in place. Returns false (the step must be skipped)
  // when any is inf or NaN; then a dynamic scale halves. Finite steps grow it on schedule.
  bool unscale(const std::vector<at::Tensor>& params);
  void set_scale(double scale) { scale_ = scale; }

 private:
  double scale_;
  bool dynamic_;
  int64_t growth_interval_;
  int64_t good_steps_ = 0;
};

}  // namespace orchard::train
