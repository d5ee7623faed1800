// Optimizers (and their learning rates) from the configurations users bring: TF's
// `optimize_loss` names with TF's default hyper-parameters (im2txt, ML-Images), and the OD
// API's optimizer.proto (rms_prop / momentum / adam with their learning-rate oneof).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "orchard/train/schedule.h"

namespace object_detection::protos {
class Optimizer;
class LearningRate;
}  // namespace object_detection::protos

namespace orchard::train {

// SGD, Momentum (with `momentum`), Adam, Adagrad, RMSProp, any case; the learning rate is the
// schedule's (set each step).
std::unique_ptr<torch::optim::Optimizer> make_tf_optimizer(const std::string& name, std::vector<at::Tensor> params,
                                                           double momentum);

// optimizer.proto: the optimizer and its learning-rate schedule.
using OptimizerAndSchedule = std::pair<std::unique_ptr<torch::optim::Optimizer>, Schedule>;
OptimizerAndSchedule make_od_api_optimizer(const object_detection::protos::Optimizer& optimizer,
                                           const std::vector<at::Tensor>& params);
Schedule od_api_learning_rate(const object_detection::protos::LearningRate& learning_rate);

}  // namespace orchard::train
