// Classification records in the ImageNet schema (build_imagenet_data.py):
//   image/encoded (JPEG/PNG bytes), image/class/label (int64, 1-based),
//   image/object/bbox/{xmin,ymin,xmax,ymax} (float lists, normalised), optional.
#pragma once

#include "orchard/data/pipeline.h"
#include "orchard/data/preprocess.h"

namespace orchard::data {

struct ImageNetParseOptions {
  PreprocessOptions preprocess;
  bool training = true;
  int64_t num_classes = 1000;  // labels after the offset must lie in [0, num_classes)
  int64_t label_offset = 1;    // records are 1-based; the model sees label - 1
};

// The image and one field, "label": int64, the 0-based class.
SampleSpec imagenet_spec(int image_size, bool channels_last);
ParseFn make_imagenet_parser(const ImageNetParseOptions& options);

// The bounding boxes of an ImageNet-schema record ([ymin, xmin, ymax, xmax] order).
class ExampleView;
std::vector<Box> imagenet_boxes(const ExampleView& ex);

}  // namespace orchard::data
