#include "orchard/data/imagenet.h"

#include "orchard/core/error.h"
#include "orchard/data/example.h"

namespace orchard::data {

SampleSpec imagenet_spec(int image_size, bool channels_last) {
  SampleSpec s;
  s.image_shape =
      channels_last ? std::vector<int64_t>{image_size, image_size, 3} : std::vector<int64_t>{3, image_size, image_size};
  s.fields = {{"label", at::kLong, {}}};
  return s;
}

std::vector<Box> imagenet_boxes(const ExampleView& ex) {
  const auto xmin = ex.floats("image/object/bbox/xmin"), ymin = ex.floats("image/object/bbox/ymin");
  const auto xmax = ex.floats("image/object/bbox/xmax"), ymax = ex.floats("image/object/bbox/ymax");
  if (xmin.size() != ymin.size() || xmin.size() != xmax.size() || xmin.size() != ymax.size())
    throw DataError(ex.source() + ": image/object/bbox/{xmin,ymin,xmax,ymax} have different lengths");
  std::vector<Box> boxes;
  for (size_t i = 0; i < xmin.size(); ++i) boxes.push_back({ymin[i], xmin[i], ymax[i], xmax[i]});
  return boxes;
}

ParseFn make_imagenet_parser(const ImageNetParseOptions& o) {
  return [o](const std::string& record, const std::string& source, std::mt19937_64& rng, const SampleOut& out) {
    ExampleView ex(record, source);
    const int64_t raw = ex.int64("image/class/label");
    const int64_t l = raw - o.label_offset;
    if (l < 0 || l >= o.num_classes)
      throw DataError(source + ": feature 'image/class/label' = " + std::to_string(raw) + " is out of range [" +
                      std::to_string(o.label_offset) + ", " + std::to_string(o.num_classes + o.label_offset - 1) +
                      "] (labels are 1-based; check --num_classes)");
    *out.field<int64_t>(0) = l;
    const std::string& encoded = ex.bytes("image/encoded");
    if (o.training) preprocess_train(encoded, imagenet_boxes(ex), o.preprocess, rng, out.image, source);
    else preprocess_eval(encoded, o.preprocess, out.image, source);
  };
}

}  // namespace orchard::data
