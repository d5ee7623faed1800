// For the files of the `model` cases' messages (ssd_message.cc, faster_rcnn_message.cc): what
// each implements, and the checks they share. Not part of orchard_detect_config's interface
// (config.h is): one file per `model` case holds its implemented fields and its checks
// (check_ssd_model, check_faster_rcnn_model in config.h); config.cc's implemented-field table
// adds each case's fields with one line.
#pragma once

#include <string>
#include <vector>

#include "orchard/proto/object_detection/image_resizer.pb.h"

namespace google::protobuf {
class Message;
}

namespace orchard::detect {

// The implemented-field entries (config.cc's format: "path" or "path=value") of model.ssd and
// model.faster_rcnn.
const std::vector<std::string>& ssd_implemented_fields();
const std::vector<std::string>& faster_rcnn_implemented_fields();

// Checks that the oneof `oneof_name` of `m` (at `path`) holds one of `allowed`; otherwise adds a
// problem. Returns whether it does.
bool check_oneof(const google::protobuf::Message& m, const std::string& oneof_name, const std::string& path,
                 const std::vector<std::string>& allowed, std::vector<std::string>* problems);
// image_resizer (at `path`): the resizers Orchard implements, image_resizer_builder's checks and
// a pad value per channel.
void check_image_resizer(const object_detection::protos::ImageResizer& resizer, const std::string& path,
                         std::vector<std::string>* problems);
// "a, b and c".
std::string join_with_and(const std::vector<std::string>& names);

}  // namespace orchard::detect
