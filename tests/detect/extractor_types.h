// The feature_extractor.type values Orchard builds, for the tests that link no libtorch and so
// cannot ask detect/feature_extractors' registry (config_test, shapes_config_test);
// feature_extractors_test checks these lists against the registry.
#pragma once

#include <string>
#include <vector>

namespace orchard::detect::registered {

inline const std::vector<std::string> kSsdTypes = {
    "ssd_mobilenet_v2",           "ssd_mobilenet_v2_keras", "ssd_mobilenet_v2_fpn",       "ssd_mobilenet_v2_fpn_keras",
    "ssd_mobilenet_v2_mnasfpn",   "ssd_mobilenet_v1",       "ssd_mobilenet_v1_keras",     "ssd_mobilenet_v1_fpn",
    "ssd_mobilenet_v1_fpn_keras", "ssd_mobilenet_v1_ppn",   "embedded_ssd_mobilenet_v1",  "ssd_resnet50_v1_fpn",
    "ssd_resnet50_v1_fpn_keras",  "ssd_resnet101_v1_fpn",   "ssd_resnet101_v1_fpn_keras", "ssd_mobilenet_v3_large",
    "ssd_mobilenet_v3_small",     "ssd_mobilenet_edgetpu",  "ssd_mobiledet_cpu",          "ssd_mobiledet_dsp",
    "ssd_mobiledet_edgetpu",      "ssd_mobiledet_gpu",      "ssd_inception_v2",           "ssd_inception_v3"};

inline const std::vector<std::string> kFasterRcnnTypes = {"faster_rcnn_resnet50", "faster_rcnn_resnet101",
                                                          "faster_rcnn_resnet152", "faster_rcnn_inception_v2",
                                                          "faster_rcnn_inception_resnet_v2"};

}  // namespace orchard::detect::registered
