#include "orchard/tasks/image_model.h"

#include <torch/torch.h>

namespace orchard::tasks {

models::ImageModel build_image_model(const models::ModelConfig& config, bool channels_last) {
  auto model = models::build_model(config);
  if (channels_last) {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters())
      if (p.dim() == 4) p.set_data(p.contiguous(torch::MemoryFormat::ChannelsLast));
  }
  return model;
}

void set_input_scaling(const models::ModelConfig& config, data::PreprocessOptions* options) {
  if (models::takes_unit_range_inputs(config.arch)) {
    options->scale = data::kInceptionScale;
    options->offset = data::kInceptionOffset;
  }
}

torch::Tensor forward_image_model(models::ImageModel& model, const torch::Tensor& images, bool channels_last) {
  auto x = images;
  if (channels_last && x.dim() == 4 && x.size(3) == 3 && x.size(1) != 3)
    x = x.permute({0, 3, 1, 2});  // NHWC storage viewed as NCHW: the channels_last memory format
  return model->forward(x);
}

}  // namespace orchard::tasks
