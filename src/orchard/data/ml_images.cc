#include "orchard/data/ml_images.h"

#include <cstring>

#include "orchard/core/error.h"
#include "orchard/data/example.h"
#include "orchard/data/imagenet.h"

namespace orchard::data {

static_assert(sizeof(float) == 4, "float32 labels");
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the parser copies little-endian float32 labels");

SampleSpec ml_images_spec(int image_size, bool channels_last, int64_t class_num) {
  SampleSpec s = imagenet_spec(image_size, channels_last);
  s.fields = {{"labels", at::kFloat, {class_num}}};
  return s;
}

ParseFn make_ml_images_parser(const MlImagesParseOptions& o) {
  return [o](const std::string& record, const std::string& source, std::mt19937_64& rng, const SampleOut& out) {
    ExampleView ex(record, source);
    const std::string& bytes = ex.bytes("label");
    const size_t expected = static_cast<size_t>(o.class_num) * sizeof(float);
    if (bytes.size() != expected)
      throw DataError(source + ": feature 'label' holds " + std::to_string(bytes.size()) + " bytes, not 4 x " +
                      std::to_string(o.class_num) + " = " + std::to_string(expected) +
                      " (float32 per class; check --class_num)");
    std::memcpy(out.field<float>(0), bytes.data(), expected);  // little-endian hosts, as tf.decode_raw
    const std::string& encoded = ex.bytes("image");
    if (o.training) preprocess_train(encoded, {}, o.preprocess, rng, out.image, source);
    else preprocess_eval(encoded, o.preprocess, out.image, source);
  };
}

std::string ml_images_label_bytes(const std::vector<float>& labels) {
  std::string bytes;
  bytes.reserve(labels.size() * 4);
  for (float v : labels) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    for (int k = 0; k < 4; ++k) bytes += static_cast<char>((bits >> (8 * k)) & 0xff);
  }
  return bytes;
}

}  // namespace orchard::data
