// The feature extractors Orchard ships: one line per base network family (one file each).
#include "orchard/detect/feature_extractors/registry.h"

namespace orchard::detect::feature_extractors {

const FeatureExtractorRegistry& registry() {
  static const FeatureExtractorRegistry r = [] {
    FeatureExtractorRegistry r;
    // SSD (error messages list the names in this order).
    register_ssd_mobilenet_v2(r);
    register_ssd_mobilenet_v1(r);
    register_ssd_resnet_v1_fpn(r);
    register_ssd_mobilenet_v3(r);
    register_ssd_mobiledet(r);
    register_ssd_inception_v2(r);
    register_ssd_inception_v3(r);
    // Faster R-CNN, R-FCN, Mask R-CNN.
    register_faster_rcnn_resnet_v1(r);
    register_faster_rcnn_inception_v2(r);
    register_faster_rcnn_inception_resnet_v2(r);
    return r;
  }();
  return r;
}

}  // namespace orchard::detect::feature_extractors
