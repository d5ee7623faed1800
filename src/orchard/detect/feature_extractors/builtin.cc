// The feature extractors Orchard ships: one line per base network family (one file each,
// defining its register_* function).
#include "orchard/detect/feature_extractors/registry.h"

namespace orchard::detect::feature_extractors {

void register_ssd_mobilenet_v1(FeatureExtractorRegistry& r);                 // ssd_mobilenet_v1.cc
void register_ssd_mobilenet_v2(FeatureExtractorRegistry& r);                 // ssd_mobilenet_v2.cc
void register_ssd_mobilenet_v3(FeatureExtractorRegistry& r);                 // ssd_mobilenet_v3.cc
void register_ssd_mobiledet(FeatureExtractorRegistry& r);                    // ssd_mobiledet.cc
void register_ssd_inception_v2(FeatureExtractorRegistry& r);                 // ssd_inception_v2.cc
void register_ssd_inception_v3(FeatureExtractorRegistry& r);                 // ssd_inception_v3.cc
void register_ssd_resnet_v1_fpn(FeatureExtractorRegistry& r);                // ssd_resnet_v1_fpn.cc
void register_faster_rcnn_resnet_v1(FeatureExtractorRegistry& r);            // faster_rcnn_resnet_v1.cc
void register_faster_rcnn_inception_v2(FeatureExtractorRegistry& r);         // faster_rcnn_inception_v2.cc
void register_faster_rcnn_inception_resnet_v2(FeatureExtractorRegistry& r);  // faster_rcnn_inception_resnet_v2.cc

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
