// Transitional: the shared layers' former names in orchard::models (they lived in
// mobilenet_v2.h and resnet.h before orchard/layers/), for the code outside models/ that still
// spells them models::X (detect/, export/, train/, tests). New code includes the
// orchard/layers/ header it needs and says layers::X; delete this file once nothing includes it.
#pragma once

#include "orchard/layers/batch_norm.h"
#include "orchard/layers/conv_norm_activation.h"
#include "orchard/layers/depth.h"
#include "orchard/layers/init.h"
#include "orchard/layers/tf_same.h"

namespace orchard::models {

using layers::batch_norm;
using layers::BatchNormOverride;
using layers::conv2d_tf_same;
using layers::ConvNormActivation;
using layers::ConvNormActivationImpl;
using layers::ConvNormActivationOptions;
using layers::make_divisible;
using layers::max_pool2d_tf_same;
using layers::set_batch_norm_override;
using layers::truncated_normal_;

}  // namespace orchard::models
