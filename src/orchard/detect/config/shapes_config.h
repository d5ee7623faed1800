// The pipeline.config that `orchard data shapes --task detection` writes beside the data: a
// small SSD-MobileNetV2 (depth multiplier 0.35) at max(96, image_size) pixels that trains to a
// useful detector on two CPU cores in minutes. configs/ssd_mobilenet_v2_shapes.config is the same
// text with PATH_TO_BE_CONFIGURED for the data directory.
#pragma once

#include <string>

namespace orchard::detect {

std::string shapes_pipeline_config(const std::string& data_dir, int image_size);

}  // namespace orchard::detect
