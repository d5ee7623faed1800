#include "orchard/detect/config/config.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/text_format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <sstream>

#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/core/spelling.h"
#include "orchard/detect/config/model_messages.h"

namespace orchard::detect {
namespace {

namespace pb = google::protobuf;
namespace odp = object_detection::protos;

// ---------------------------------------------------------------------------------------------
// What Orchard implements. An entry is a field path (a leaf field, or a sub-message with
// everything in it) or "path=value" (implemented for that value only; a repeated field must have
// only that value). Paths leave out repeated indices. A set field no entry covers is reported as
// unimplemented; edit these tables as the implementation grows. This one holds the messages every
// model shares; each `model` case's fields are in its own file (model_messages.h).
const char* const kImplemented[] = {
    "graph_rewriter.quantization",  // quantization-aware training (SSD MobileNet V1 / V2; others refuse it)
    "train_config.batch_size",
    "train_config.data_augmentation_options.random_horizontal_flip",
    "train_config.data_augmentation_options.ssd_random_crop",
    "train_config.data_augmentation_options.random_crop_image",
    "train_config.data_augmentation_options.ssd_random_crop_fixed_aspect_ratio",
    "train_config.optimizer.rms_prop_optimizer",
    "train_config.optimizer.momentum_optimizer",
    "train_config.optimizer.adam_optimizer",
    "train_config.optimizer.use_moving_average",
    "train_config.optimizer.moving_average_decay",
    "train_config.fine_tune_checkpoint",
    "train_config.fine_tune_checkpoint_type",
    "train_config.from_detection_checkpoint",
    "train_config.load_all_detection_checkpoint_vars",
    "train_config.num_steps",
    "train_config.gradient_clipping_by_norm",
    "train_config.max_number_of_boxes",
    "train_config.merge_multiple_label_boxes",  // faster_rcnn (validate_pipeline_config refuses it for ssd)
    // Synchronous data parallelism is how Orchard always trains: batch_size is the global batch
    // over the job's workers (as on the TPUs the *_sync configs were written for).
    "train_config.sync_replicas",
    "train_config.replicas_to_aggregate",
    "train_config.startup_delay_steps",        // no effect: workers start together
    "train_config.unpad_groundtruth_tensors",  // no effect: boxes are padded and counted either way
    "train_input_reader.label_map_path",
    "train_input_reader.shuffle",
    "train_input_reader.num_readers",
    "train_input_reader.tf_record_input_reader.input_path",
    "train_input_reader.max_number_of_boxes",
    "train_input_reader.num_epochs",
    "train_input_reader.load_instance_masks",
    "train_input_reader.mask_type",  // PNG_MASKS; others refused by detection_config with load_instance_masks
    "eval_config.num_examples",
    "eval_config.metrics_set=coco_detection_metrics",
    "eval_config.metrics_set=coco_mask_metrics",
    "eval_config.metrics_set=pascal_voc_detection_metrics",
    "eval_config.metrics_set=weighted_pascal_voc_detection_metrics",
    "eval_config.metrics_set=oid_V2_detection_metrics",
    "eval_config.metrics_set=open_images_V2_detection_metrics",
    "eval_config.metrics_set=open_images_metrics",
    "eval_config.metrics_set=oid_challenge_detection_metrics",
    "eval_config.image_classes_field_map_empty_to_ones",  // oid_challenge_detection_metrics' empty image labels
    "eval_config.num_visualizations",
    "eval_config.max_evals",
    "eval_config.include_metrics_per_category",
    "eval_config.min_score_threshold",
    "eval_config.use_moving_averages",
    "eval_input_reader.label_map_path",
    "eval_input_reader.shuffle",
    "eval_input_reader.num_readers",
    "eval_input_reader.num_epochs",
    "eval_input_reader.tf_record_input_reader.input_path",
    "eval_input_reader.sample_1_of_n_examples",
    "eval_input_reader.load_instance_masks",
    "eval_input_reader.mask_type",
};

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? sep : "") + parts[i];
  return out;
}

class ImplementedTable {
 public:
  ImplementedTable() {
    for (const char* e : kImplemented) add(e);
    // One line per `model` case.
    for (const auto& e : ssd_implemented_fields()) add(e);
    for (const auto& e : faster_rcnn_implemented_fields()) add(e);
  }

  // The field at `path` (any value), or a sub-message containing it, is implemented.
  bool covers(const std::string& path) const {
    for (const auto& e : entries_)
      if (!e.has_value && (path == e.path || starts_with(path, e.path + "."))) return true;
    return false;
  }
  // Something inside the sub-message at `path` is implemented.
  bool has_below(const std::string& path) const {
    for (const auto& e : entries_)
      if (starts_with(e.path, path + ".")) return true;
    return false;
  }
  // The values implemented for the field at `path` (empty: none).
  std::vector<std::string> values(const std::string& path) const {
    std::vector<std::string> out;
    for (const auto& e : entries_)
      if (e.has_value && e.path == path) out.push_back(e.value);
    return out;
  }

 private:
  struct Entry {
    std::string path, value;
    bool has_value = false;
  };
  void add(const std::string& e) {
    Entry entry;
    size_t eq = e.find('=');
    entry.path = e.substr(0, eq);
    if (eq != std::string::npos) {
      entry.value = e.substr(eq + 1);
      entry.has_value = true;
    }
    entries_.push_back(std::move(entry));
  }
  std::vector<Entry> entries_;
};

const ImplementedTable& implemented_table() {
  static const ImplementedTable table;
  return table;
}

// A scalar field's value as written in a config (enum by name, bool as true/false, strings bare).
std::string value_text(const pb::Message& m, const pb::FieldDescriptor* f, int index) {
  const pb::Reflection* r = m.GetReflection();
  const bool rep = f->is_repeated();
  switch (f->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_BOOL:
      return (rep ? r->GetRepeatedBool(m, f, index) : r->GetBool(m, f)) ? "true" : "false";
    case pb::FieldDescriptor::CPPTYPE_ENUM: return (rep ? r->GetRepeatedEnum(m, f, index) : r->GetEnum(m, f))->name();
    case pb::FieldDescriptor::CPPTYPE_STRING: return rep ? r->GetRepeatedString(m, f, index) : r->GetString(m, f);
    default: {
      std::string out;
      pb::TextFormat::PrintFieldValueToString(m, f, rep ? index : -1, &out);
      return out;
    }
  }
}

void find_unimplemented(const pb::Message& m, const std::string& prefix, const ImplementedTable& table,
                        std::vector<std::string>* out) {
  auto add = [&](const std::string& path) {
    if (std::find(out->begin(), out->end(), path) == out->end()) out->push_back(path);
  };
  const pb::Reflection* r = m.GetReflection();
  std::vector<const pb::FieldDescriptor*> fields;
  r->ListFields(m, &fields);
  for (const auto* f : fields) {
    const std::string name = f->is_extension() ? "[" + f->full_name() + "]" : f->name();
    const std::string path = prefix.empty() ? name : prefix + "." + name;
    if (table.covers(path)) continue;
    if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      if (!table.has_below(path)) {
        add(path);  // nothing inside is implemented: one entry for the whole sub-message
        continue;
      }
      if (f->is_repeated()) {
        for (int i = 0; i < r->FieldSize(m, f); ++i)
          find_unimplemented(r->GetRepeatedMessage(m, f, i), path, table, out);
      } else {
        find_unimplemented(r->GetMessage(m, f), path, table, out);
      }
      continue;
    }
    const std::vector<std::string> allowed = table.values(path);
    const int n = f->is_repeated() ? r->FieldSize(m, f) : 1;
    for (int i = 0; i < n; ++i) {
      if (std::find(allowed.begin(), allowed.end(), value_text(m, f, i)) == allowed.end()) {
        add(path);
        break;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Text format parsing.

class Collector : public pb::io::ErrorCollector {
 public:
  struct Note {
    int line, column;
    std::string message;
  };
  void AddError(int line, pb::io::ColumnNumber column, const std::string& message) override {
    errors.push_back({line, column, message});
  }
  void AddWarning(int line, pb::io::ColumnNumber column, const std::string& message) override {
    warnings.push_back({line, column, message});
  }
  std::vector<Note> errors, warnings;
};

class SilentCollector : public pb::io::ErrorCollector {
 public:
  void AddError(int, pb::io::ColumnNumber, const std::string&) override {}
};

// The dotted path of the message enclosing the text position (line, column), both zero-based:
// the field names of the open `name { ... }` blocks, repeated indices left out. Follows the text
// format's grammar closely enough for that (values, [lists], [extension.names], both brackets).
std::string enclosing_path(const std::string& text, int line, int column) {
  pb::io::ArrayInputStream input(text.data(), static_cast<int>(text.size()));
  SilentCollector silent;
  pb::io::Tokenizer tok(&input, &silent);
  tok.set_comment_style(pb::io::Tokenizer::SH_COMMENT_STYLE);
  tok.set_require_space_after_number(false);
  tok.set_allow_multiline_strings(true);
  tok.set_allow_f_after_float(true);

  struct Frame {
    bool list;  // inside [ ... ] of a repeated field
    std::string name;
  };
  std::vector<Frame> stack;
  std::string pending;  // the field name just read
  bool prev_is_name = false;
  std::string prev;  // previous token's text
  while (tok.Next()) {
    const auto& t = tok.current();
    if (t.line > line || (t.line == line && t.column >= column)) break;
    const bool in_list = !stack.empty() && stack.back().list;
    bool is_name = false;
    if (t.type == pb::io::Tokenizer::TYPE_IDENTIFIER) {
      if (!in_list && prev != ":" && prev != "-") {
        pending = t.text;
        is_name = true;
      }
    } else if (t.text == "{" || t.text == "<") {
      stack.push_back({false, in_list ? stack.back().name : pending});
      pending.clear();
    } else if (t.text == "}" || t.text == ">") {
      if (!stack.empty() && !stack.back().list) stack.pop_back();
      pending.clear();
    } else if (t.text == "[" && !in_list) {
      if (prev_is_name || prev == ":") {
        stack.push_back({true, pending});
      } else {  // [extension.name] or [type.googleapis.com/Any]
        std::string ext = "[";
        while (tok.Next() && tok.current().text != "]") ext += tok.current().text;
        pending = ext + "]";
        is_name = true;
      }
    } else if (t.text == "]" && in_list) {
      stack.pop_back();
    }
    prev_is_name = is_name;
    prev = t.type == pb::io::Tokenizer::TYPE_STRING ? std::string("\"") : t.text;
  }
  std::vector<std::string> names;
  for (const auto& f : stack)
    if (!f.list) names.push_back(f.name);
  return join(names, ".");
}

// The quoted text after `key` in a protobuf message ('Message type "a.B" has no field named
// "foo".'), or "".
std::string quoted_after(const std::string& message, const std::string& key) {
  size_t b = message.find(key + "\"");
  if (b == std::string::npos) return "";
  b += key.size() + 1;
  size_t e = message.find('"', b);
  return e == std::string::npos ? "" : message.substr(b, e - b);
}

// The field of message type `type` whose name is closest to `name` (a misspelling: at most a
// third of the name's letters differ), or "".
std::string closest_field(const std::string& type, const std::string& name) {
  const auto* d = pb::DescriptorPool::generated_pool()->FindMessageTypeByName(type);
  if (!d) return "";
  std::vector<std::string> fields;
  for (int i = 0; i < d->field_count(); ++i) fields.push_back(d->field(i)->name());
  return closest_name(name, fields);
}

// The last line before `line` (zero-based) with something on it, and its number; -1 if none.
std::pair<int, std::string> previous_content_line(const std::string& text, int line) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  for (int i = std::min<int>(line, static_cast<int>(lines.size())) - 1; i >= 0; --i) {
    const auto& l = lines[i];
    const size_t b = l.find_first_not_of(" \t\r");
    if (b != std::string::npos && l[b] != '#') return {i, l.substr(b)};
  }
  return {-1, ""};
}

}  // namespace

void parse_text_proto(const std::string& text, const std::string& source_name, pb::Message* message,
                      std::vector<std::string>* unknown) {
  pb::TextFormat::Parser parser;
  Collector collector;
  parser.RecordErrorsTo(&collector);
  // Protobuf then skips a field the schema lacks and reports it through AddWarning.
  parser.AllowUnknownField(true);
  pb::io::ArrayInputStream input(text.data(), static_cast<int>(text.size()));
  if (!parser.Parse(&input, message)) {
    if (collector.errors.empty()) throw Error(source_name + ": cannot parse as " + message->GetTypeName());
    const auto& e = collector.errors.front();
    std::string what =
        source_name + ":" + std::to_string(e.line + 1) + ":" + std::to_string(e.column + 1) + ": " + e.message;
    // A token the parser did not expect at the start of a line: the mistake is most often at
    // the end of the line before (a value left out, a brace not opened).
    const std::string line_text = [&] {
      std::istringstream in(text);
      std::string l;
      for (int i = 0; i <= e.line && std::getline(in, l); ++i) {
      }
      return l;
    }();
    const size_t first = line_text.find_first_not_of(" \t");
    if (first != std::string::npos && static_cast<int>(first) >= e.column && e.message.rfind("Expected", 0) == 0) {
      const auto [prev_line, prev_text] = previous_content_line(text, e.line);
      if (prev_line >= 0)
        what = source_name + ":" + std::to_string(prev_line + 1) + ": after `" + prev_text + "`: " + e.message +
               " (at line " + std::to_string(e.line + 1) + ")";
    }
    throw Error(what);
  }
  for (const auto& w : collector.warnings) {
    const std::string field = quoted_after(w.message, "has no field named ");
    const std::string at = " (line " + std::to_string(w.line + 1) + ")";
    if (field.empty()) {
      unknown->push_back(w.message + at);
      continue;
    }
    const std::string parent = enclosing_path(text, w.line, w.column);
    const std::string suggestion = closest_field(quoted_after(w.message, "Message type "), field);
    unknown->push_back((parent.empty() ? field : parent + "." + field) + at +
                       (suggestion.empty() ? "" : " (did you mean " + suggestion + "?)"));
  }
}

namespace {

// " (line <n>)" of the first line of `text` that sets `field` (`field {` or `field:`), outside
// comments; "" where none does.
std::string line_of_field(const std::string& text, const std::string& field) {
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const std::string code = line.substr(0, line.find('#'));
    const size_t at = code.find(field);
    if (at == std::string::npos ||
        (at > 0 && (std::isalnum(static_cast<unsigned char>(code[at - 1])) || code[at - 1] == '_')))
      continue;
    const size_t next = code.find_first_not_of(" \t", at + field.size());
    if (next != std::string::npos && (code[next] == '{' || code[next] == ':'))
      return " (line " + std::to_string(n) + ")";
  }
  return "";
}

}  // namespace

odp::TrainEvalPipelineConfig parse_pipeline_config(const std::string& text, const std::string& source_name, bool strict,
                                                   ConfigIssues* issues, bool allow_unknown_fields) {
  odp::TrainEvalPipelineConfig config;
  ConfigIssues found;
  std::vector<std::string> unknown;
  parse_text_proto(text, source_name, &config, &unknown);
  find_unimplemented(config, "", implemented_table(), &found.unimplemented);
  // Unknown fields inside a sub-message already reported as a whole (e.g. model.faster_rcnn)
  // add nothing.
  for (const auto& u : unknown) {
    const bool inside = std::any_of(found.unimplemented.begin(), found.unimplemented.end(),
                                    [&](const std::string& p) { return starts_with(u, p + "."); });
    if (!inside) found.unknown.push_back(u);
  }
  if (issues) *issues = found;
  // Context R-CNN: without its context_config the config is a plain Faster R-CNN, another model
  // than the one asked for, so it is refused rather than reported as an ignored field.
  if (config.model().faster_rcnn().has_context_config())
    throw Error(source_name + ": Context R-CNN (model.faster_rcnn.context_config" +
                line_of_field(text, "context_config") +
                ") is not supported: Orchard's faster_rcnn has no attention over context features, and "
                "without them this config would train a plain Faster R-CNN");
  if (found.unknown.empty() && found.unimplemented.empty()) return config;
  // Fields outside the schema are errors, as TensorFlow's parser makes them: most often a
  // misspelling whose value would otherwise be silently replaced by the default.
  if (!found.unknown.empty() && !allow_unknown_fields && !strict)
    throw Error(source_name + ": fields not in the pipeline.config schema: " + join(found.unknown, ", ") +
                " (--allow_unknown_fields ignores them, e.g. for a config from a newer OD API)");

  std::vector<std::string> parts;
  if (!found.unknown.empty()) parts.push_back("fields not in the pipeline.config schema: " + join(found.unknown, ", "));
  if (!found.unimplemented.empty())
    parts.push_back("set fields Orchard does not implement: " + join(found.unimplemented, ", "));
  if (strict) throw Error(source_name + ": " + join(parts, "; ") + " (strict mode)");
  spdlog::warn("{}: {}; they are ignored", source_name, join(parts, "; "));
  return config;
}

odp::TrainEvalPipelineConfig load_pipeline_config(const std::string& path, bool strict, ConfigIssues* issues,
                                                  bool allow_unknown_fields) {
  return parse_pipeline_config(read_file(path), path, strict, issues, allow_unknown_fields);
}

std::string pipeline_config_to_text(const odp::TrainEvalPipelineConfig& config) {
  std::string out;
  if (!pb::TextFormat::PrintToString(config, &out)) throw Error("cannot print the pipeline config");
  return out;
}

// Checks that the oneof `oneof_name` of `m` (at `path`) holds one of `allowed`; otherwise adds a
// problem. Returns whether it does.
bool check_oneof(const pb::Message& m, const std::string& oneof_name, const std::string& path,
                 const std::vector<std::string>& allowed, std::vector<std::string>* problems) {
  const pb::OneofDescriptor* oneof = m.GetDescriptor()->FindOneofByName(oneof_name);
  const pb::FieldDescriptor* set = oneof ? m.GetReflection()->GetOneofFieldDescriptor(m, oneof) : nullptr;
  const std::string expected = join(allowed, " or ");
  if (!set) {
    problems->push_back(path + " is not set; Orchard implements " + expected);
    return false;
  }
  if (std::find(allowed.begin(), allowed.end(), set->name()) == allowed.end()) {
    problems->push_back(path + "." + set->name() + " is not supported; Orchard implements " + expected);
    return false;
  }
  return true;
}

// image_resizer (at `path`): the resizers Orchard implements, image_resizer_builder's checks and
// a pad value per channel.
void check_image_resizer(const odp::ImageResizer& resizer, const std::string& path,
                         std::vector<std::string>* problems) {
  check_oneof(resizer, "image_resizer_oneof", path, {"fixed_shape_resizer", "keep_aspect_ratio_resizer"}, problems);
  if (!resizer.has_keep_aspect_ratio_resizer()) return;
  const auto& k = resizer.keep_aspect_ratio_resizer();
  if (k.min_dimension() <= 0 || k.min_dimension() > k.max_dimension())
    problems->push_back(path + ".keep_aspect_ratio_resizer: min_dimension " + std::to_string(k.min_dimension()) +
                        " must be positive and at most max_dimension " + std::to_string(k.max_dimension()));
  if (k.per_channel_pad_value_size() != 0 && k.per_channel_pad_value_size() != 3)
    problems->push_back(path + ".keep_aspect_ratio_resizer.per_channel_pad_value has " +
                        std::to_string(k.per_channel_pad_value_size()) + " values; it needs one per channel (3)");
}

// "a, b and c".
std::string join_with_and(const std::vector<std::string>& names) {
  std::string list;
  for (size_t i = 0; i < names.size(); ++i) list += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return list;
}

void validate_pipeline_config(const odp::TrainEvalPipelineConfig& config, const std::string& source_name,
                              const std::vector<ModelValidator>& models) {
  std::vector<std::string> problems;
  // The `model` oneof: one of the cases the caller implements (tasks/detect's meta-architecture
  // registry), then that case's own checks.
  std::vector<std::string> names;
  for (const auto& m : models) names.push_back(m.name);
  if (check_oneof(config.model(), "model", "model", names, &problems)) {
    const auto* set = config.model().GetReflection()->GetOneofFieldDescriptor(
        config.model(), config.model().GetDescriptor()->FindOneofByName("model"));
    for (const auto& m : models)
      if (m.name == set->name() && m.check) m.check(config, &problems);
  }

  const odp::Optimizer& opt = config.train_config().optimizer();
  if (check_oneof(opt, "optimizer", "train_config.optimizer",
                  {"rms_prop_optimizer", "momentum_optimizer", "adam_optimizer"}, &problems)) {
    const odp::LearningRate* lr = nullptr;
    std::string name;
    switch (opt.optimizer_case()) {
      case odp::Optimizer::kRmsPropOptimizer:
        lr = &opt.rms_prop_optimizer().learning_rate();
        name = "rms_prop_optimizer";
        break;
      case odp::Optimizer::kMomentumOptimizer:
        lr = &opt.momentum_optimizer().learning_rate();
        name = "momentum_optimizer";
        break;
      default:
        lr = &opt.adam_optimizer().learning_rate();
        name = "adam_optimizer";
        break;
    }
    check_oneof(*lr, "learning_rate", "train_config.optimizer." + name + ".learning_rate",
                {"constant_learning_rate", "exponential_decay_learning_rate", "manual_step_learning_rate",
                 "cosine_decay_learning_rate"},
                &problems);
  }

  const std::string& ft = config.train_config().fine_tune_checkpoint_type();
  if (ft != "" && ft != "classification" && ft != "detection" && ft != "full")
    problems.push_back("train_config.fine_tune_checkpoint_type '" + ft +
                       "' is not supported; Orchard implements \"\", classification, detection or full");

  const auto& train_paths = config.train_input_reader().tf_record_input_reader().input_path();
  if (std::none_of(train_paths.begin(), train_paths.end(), [](const std::string& p) { return !p.empty(); }))
    problems.push_back("train_input_reader.tf_record_input_reader.input_path is not set");

  if (!problems.empty()) throw Error(source_name + ": " + join(problems, "; "));
}

bool is_placeholder_path(const std::string& value) { return value.find("PATH_TO_BE_CONFIGURED") != std::string::npos; }

std::string placeholder_message(const std::string& field, const std::string& value, const std::string& what) {
  return field + " is still the sample config's placeholder " + value + ": set it to " + what;
}

namespace {

// One field's value as text format writes it; a list for a repeated field.
std::string field_text(const pb::Message& m, const pb::FieldDescriptor* f) {
  std::string out;
  if (!f->is_repeated()) {
    pb::TextFormat::PrintFieldValueToString(m, f, -1, &out);
    return out;
  }
  const int n = m.GetReflection()->FieldSize(m, f);
  out = "[";
  for (int i = 0; i < n; ++i) {
    std::string v;
    pb::TextFormat::PrintFieldValueToString(m, f, i, &v);
    out += (i ? ", " : "") + v;
  }
  return out + "]";
}

void collect_differences(const pb::Message& a, const pb::Message& b, const std::string& path,
                         std::vector<std::string>* out) {
  const pb::Descriptor* d = a.GetDescriptor();
  const pb::Reflection* ra = a.GetReflection();
  const pb::Reflection* rb = b.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    const std::string p = path + "." + f->name();
    if (f->is_repeated()) {
      const int na = ra->FieldSize(a, f), nb = rb->FieldSize(b, f);
      if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE && na == nb) {
        for (int k = 0; k < na; ++k)
          collect_differences(ra->GetRepeatedMessage(a, f, k), rb->GetRepeatedMessage(b, f, k),
                              p + "[" + std::to_string(k) + "]", out);
      } else if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
        out->push_back(p + " (" + std::to_string(na) + " here, " + std::to_string(nb) + " there)");
      } else if (field_text(a, f) != field_text(b, f)) {
        out->push_back(p + " (" + field_text(a, f) + " here, " + field_text(b, f) + " there)");
      }
      continue;
    }
    const bool ha = ra->HasField(a, f), hb = rb->HasField(b, f);
    if (f->containing_oneof() && ha != hb) {
      if (ha || hb) out->push_back(p + (ha ? " (set here, not there)" : " (set there, not here)"));
      continue;
    }
    if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      if (ha || hb) collect_differences(ra->GetMessage(a, f), rb->GetMessage(b, f), p, out);  // unset: its defaults
      continue;
    }
    if (field_text(a, f) != field_text(b, f))
      out->push_back(p + " (" + field_text(a, f) + " here, " + field_text(b, f) + " there)");
  }
}

}  // namespace

std::vector<std::string> message_differences(const pb::Message& a, const pb::Message& b, const std::string& path) {
  if (a.GetDescriptor() != b.GetDescriptor()) throw std::invalid_argument("message_differences: two message types");
  std::vector<std::string> out;
  collect_differences(a, b, path, &out);
  return out;
}

std::vector<std::string> input_files(const odp::InputReader& reader, const std::string& source_name,
                                     const std::string& reader_field) {
  const std::string field = reader_field + ".tf_record_input_reader.input_path";
  if (reader.tf_record_input_reader().input_path().empty()) throw Error(source_name + ": " + field + " is not set");
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const auto& pattern : reader.tf_record_input_reader().input_path()) {
    std::vector<std::string> files;
    try {
      files = expand_file_pattern(pattern);
    } catch (const Error& e) {
      if (is_placeholder_path(pattern))
        throw Error(source_name + ": " + placeholder_message(field, pattern, "your TFRecord files"));
      throw Error(source_name + ": " + field + ": " + e.what());
    }
    for (auto& f : files)
      if (seen.insert(f).second) out.push_back(std::move(f));
  }
  return out;
}

}  // namespace orchard::detect
