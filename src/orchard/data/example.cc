#include "orchard/data/example.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <nlohmann/json.hpp>

#include "orchard/core/error.h"

namespace orchard::data {
namespace {

const char* kind_name(tensorflow::Feature::KindCase k) {
  switch (k) {
    case tensorflow::Feature::kBytesList: return "bytes_list";
    case tensorflow::Feature::kFloatList: return "float_list";
    case tensorflow::Feature::kInt64List: return "int64_list";
    default: return "empty";
  }
}

}  // namespace

ExampleView::ExampleView(const std::string& serialized, std::string source) : source_(std::move(source)) {
  if (!owned_.ParseFromString(serialized)) throw DataError(source_ + ": not a serialized tf.train.Example");
  features_ = &owned_.features();
}

ExampleView::ExampleView(const tensorflow::Features& features, std::string source)
    : features_(&features), source_(std::move(source)) {}

bool ExampleView::has(const std::string& key) const { return features_->feature().count(key) > 0; }

const tensorflow::Feature* ExampleView::find(const std::string& key, tensorflow::Feature::KindCase kind) const {
  auto it = features_->feature().find(key);
  if (it == features_->feature().end()) return nullptr;
  const auto k = it->second.kind_case();
  if (k != kind && k != tensorflow::Feature::KIND_NOT_SET)
    throw DataError(source_ + ": feature '" + key + "' is " + kind_name(k) + ", expected " + kind_name(kind));
  return &it->second;
}

const tensorflow::Feature& ExampleView::get(const std::string& key, tensorflow::Feature::KindCase kind) const {
  const auto* f = find(key, kind);
  if (!f) throw DataError(source_ + ": missing feature '" + key + "' (" + kind_name(kind) + ")");
  return *f;
}

const std::string& ExampleView::bytes(const std::string& key) const {
  const auto& f = get(key, tensorflow::Feature::kBytesList);
  if (f.bytes_list().value_size() < 1) throw DataError(source_ + ": feature '" + key + "' is empty");
  return f.bytes_list().value(0);
}

int64_t ExampleView::int64(const std::string& key) const {
  const auto& f = get(key, tensorflow::Feature::kInt64List);
  if (f.int64_list().value_size() < 1) throw DataError(source_ + ": feature '" + key + "' is empty");
  return f.int64_list().value(0);
}

float ExampleView::float32(const std::string& key) const {
  const auto& f = get(key, tensorflow::Feature::kFloatList);
  if (f.float_list().value_size() < 1) throw DataError(source_ + ": feature '" + key + "' is empty");
  return f.float_list().value(0);
}

std::vector<float> ExampleView::floats(const std::string& key) const {
  const auto* f = find(key, tensorflow::Feature::kFloatList);
  if (!f) return {};
  return {f->float_list().value().begin(), f->float_list().value().end()};
}

std::vector<int64_t> ExampleView::int64s(const std::string& key) const {
  const auto* f = find(key, tensorflow::Feature::kInt64List);
  if (!f) return {};
  return {f->int64_list().value().begin(), f->int64_list().value().end()};
}

std::vector<std::string> ExampleView::bytes_list(const std::string& key) const {
  const auto* f = find(key, tensorflow::Feature::kBytesList);
  if (!f) return {};
  return {f->bytes_list().value().begin(), f->bytes_list().value().end()};
}

void set_bytes(tensorflow::Features* f, const std::string& key, const std::string& value) {
  auto& feat = (*f->mutable_feature())[key];
  feat.mutable_bytes_list()->clear_value();
  feat.mutable_bytes_list()->add_value(value);
}

void set_int64s(tensorflow::Features* f, const std::string& key, const std::vector<int64_t>& values) {
  auto* list = (*f->mutable_feature())[key].mutable_int64_list();
  list->clear_value();
  for (auto v : values) list->add_value(v);
}

void set_floats(tensorflow::Features* f, const std::string& key, const std::vector<float>& values) {
  auto* list = (*f->mutable_feature())[key].mutable_float_list();
  list->clear_value();
  for (auto v : values) list->add_value(v);
}

namespace {

nlohmann::json bytes_to_json(const std::string& b) {
  bool printable = b.size() <= 256;
  for (unsigned char c : b)
    if (c < 0x20 || c >= 0x7f) {
      printable = false;
      break;
    }
  if (printable) return b;
  static const char* hex = "0123456789abcdef";
  std::string prefix;
  for (size_t i = 0; i < std::min<size_t>(b.size(), 16); ++i) {
    prefix += hex[static_cast<unsigned char>(b[i]) >> 4];
    prefix += hex[static_cast<unsigned char>(b[i]) & 15];
  }
  return {{"bytes", b.size()}, {"hex_prefix", prefix}};
}

nlohmann::json feature_to_json(const tensorflow::Feature& f) {
  nlohmann::json values = nlohmann::json::array();
  switch (f.kind_case()) {
    case tensorflow::Feature::kBytesList:
      for (const auto& v : f.bytes_list().value()) values.push_back(bytes_to_json(v));
      return {{"bytes_list", values}};
    case tensorflow::Feature::kFloatList:
      for (float v : f.float_list().value()) values.push_back(v);
      return {{"float_list", values}};
    case tensorflow::Feature::kInt64List:
      for (auto v : f.int64_list().value()) values.push_back(v);
      return {{"int64_list", values}};
    default: return nullptr;
  }
}

nlohmann::json features_json(const tensorflow::Features& features) {
  nlohmann::json out = nlohmann::json::object();  // std::map inside: keys come out sorted
  for (const auto& [key, f] : features.feature()) out[key] = feature_to_json(f);
  return out;
}

}  // namespace

std::string features_to_json(const tensorflow::Features& features) { return features_json(features).dump(); }

std::string record_to_json(const std::string& serialized) {
  // A SequenceExample with feature_lists is not a valid Example parse target in general,
  // so try SequenceExample first when it has feature lists.
  tensorflow::SequenceExample seq;
  if (seq.ParseFromString(serialized) && seq.feature_lists().feature_list_size() > 0) {
    nlohmann::json lists = nlohmann::json::object();
    for (const auto& [key, fl] : seq.feature_lists().feature_list()) {
      nlohmann::json steps = nlohmann::json::array();
      for (const auto& f : fl.feature()) steps.push_back(feature_to_json(f));
      lists[key] = steps;
    }
    return nlohmann::json{{"context", features_json(seq.context())}, {"feature_lists", lists}}.dump();
  }
  tensorflow::Example ex;
  if (!ex.ParseFromString(serialized)) throw DataError("not a serialized tf.train.Example or SequenceExample");
  return nlohmann::json{{"features", features_json(ex.features())}}.dump();
}

std::string serialize_deterministic(const google::protobuf::MessageLite& message) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    message.SerializeToCodedStream(&coded);
  }
  return out;
}

}  // namespace orchard::data
