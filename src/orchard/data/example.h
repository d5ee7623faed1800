// Typed access to tf.train.Example features. Errors name the record and the feature.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "orchard/proto/example.pb.h"

namespace orchard::data {

// A parsed tf.train.Example plus where it came from ("file: record N"), for errors.
class ExampleView {
 public:
  // Parses a serialized Example; throws DataError naming `source` if it is not one.
  ExampleView(const std::string& serialized, std::string source);
  explicit ExampleView(const tensorflow::Features& features, std::string source);

  bool has(const std::string& key) const;
  // Required features: throw DataError if missing, of another kind, or empty.
  const std::string& bytes(const std::string& key) const;
  int64_t int64(const std::string& key) const;
  float float32(const std::string& key) const;
  // Optional lists: empty if the feature is missing; DataError if it has another kind.
  std::vector<float> floats(const std::string& key) const;
  std::vector<int64_t> int64s(const std::string& key) const;
  std::vector<std::string> bytes_list(const std::string& key) const;

  const std::string& source() const { return source_; }
  const tensorflow::Features& features() const { return *features_; }

 private:
  const tensorflow::Feature& get(const std::string& key, tensorflow::Feature::KindCase kind) const;
  const tensorflow::Feature* find(const std::string& key, tensorflow::Feature::KindCase kind) const;

  tensorflow::Example owned_;
  const tensorflow::Features* features_;
  std::string source_;
};

// Builders for writing records.
void set_bytes(tensorflow::Features* f, const std::string& key, const std::string& value);
void set_int64s(tensorflow::Features* f, const std::string& key, const std::vector<int64_t>& values);
void set_floats(tensorflow::Features* f, const std::string& key, const std::vector<float>& values);

// The serialized bytes with map entries (the features) in sorted key order: protobuf's
// default order is a hash order that changes between runs, so data tools use this to write
// the same bytes for the same input.
std::string serialize_deterministic(const google::protobuf::MessageLite& message);

// Every feature of an Example or SequenceExample as one JSON object (bytes shown by length
// and a short hex prefix, or as text when printable). Used by `orchard data inspect`.
std::string features_to_json(const tensorflow::Features& features);
std::string record_to_json(const std::string& serialized);

}  // namespace orchard::data
